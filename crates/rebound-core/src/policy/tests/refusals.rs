//! Policies refused when compiled, with the reason shown: node actions in
//! a tenant policy, too-expensive or invalid CEL.

use super::*;

#[test]
fn tenant_policy_asking_for_node_actions_is_refused_with_a_reason() {
    let mut s = PolicySet::new(ROOT);
    let tenant = policy(
        "team-a",
        "greedy",
        RecoveryPolicySpec {
            node_actions: Some(NodeActions {
                max_separated: Some("100%".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let w = s.upsert(&tenant).unwrap();
    assert_eq!(w[0].reason, "NodeActionsIgnored");
    let (cfg, from) = s.node_config(&NodeConfig::default());
    assert_eq!(cfg.max_separated, Limit::Percent(10));
    assert_eq!(from, "operator configuration");
    let root = policy(
        ROOT,
        "nodes",
        RecoveryPolicySpec {
            node_actions: Some(NodeActions {
                max_separated: Some("3".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    assert!(s.upsert(&root).unwrap().is_empty());
    assert_eq!(
        s.node_config(&NodeConfig::default()).0.max_separated,
        Limit::Count(3)
    );
}

/// Nested comprehensions ten deep (10^10 steps in a few hundred bytes).
fn exponential_cel() -> String {
    let l = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]";
    let mut body = "a0 < a9".to_string();
    for d in (0..10).rev() {
        body = format!("{l}.all(a{d}, {body})");
    }
    body
}

#[test]
fn an_exponential_expression_is_refused_as_too_expensive_and_not_used() {
    let mut s = PolicySet::new(ROOT);
    for (when, cooldown, field) in [
        (Some(exponential_cel()), None, "spec.when"),
        (
            None,
            Some(format!("{} ? 1 : 2", exponential_cel())),
            "spec.cooldown",
        ),
    ] {
        let p = policy(
            "team-a",
            "expensive",
            RecoveryPolicySpec {
                when,
                cooldown,
                ..Default::default()
            },
        );
        let e = s.upsert(&p).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.reason),
            (field, "ExpressionTooExpensive")
        );
        assert!(e.message.contains("exceeds the limit of 100000"), "{e}");
        assert!(s.invalid("team-a", "expensive").is_some());
        let d = decide_job(
            &classified(Level::RestartJob, false),
            None,
            &job("team-a", &[], vec![]),
            &s,
            false,
            now(),
        );
        assert_eq!(d.skip, Some(Skip::NoPolicy), "{field}");
    }
}

#[test]
fn invalid_cel_is_a_clear_error_and_the_policy_is_not_used() {
    let mut s = PolicySet::new(ROOT);
    let bad = policy(
        "team-a",
        "bad",
        RecoveryPolicySpec {
            when: Some("fault.level = 'x'".into()),
            ..Default::default()
        },
    );
    let e = s.upsert(&bad).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.reason),
        ("spec.when", "InvalidExpression")
    );
    assert!(s.invalid("team-a", "bad").is_some());
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job("team-a", &[], vec![]),
        &s,
        false,
        now(),
    );
    assert_eq!(d.skip, Some(Skip::NoPolicy));
    let bad = policy(
        "team-a",
        "bad2",
        RecoveryPolicySpec {
            cooldown: Some("thirty seconds".into()),
            ..Default::default()
        },
    );
    let e = s.upsert(&bad).unwrap_err();
    assert!(e.message.contains("neither a duration"), "{e}");
    let bad = policy(
        "team-a",
        "bad3",
        RecoveryPolicySpec {
            when: Some("pod.name == 'x'".into()),
            ..Default::default()
        },
    );
    assert!(
        s.upsert(&bad)
            .unwrap_err()
            .message
            .contains("unknown variable `pod`")
    );
}
