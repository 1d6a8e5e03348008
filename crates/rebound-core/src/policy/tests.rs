use super::*;
use crate::api::{
    GradedEscalation, NodeActions, RecoveryPolicy, RecoveryPolicySpec, RestartBudget, WorkloadKind,
};
use crate::expr::JobView;
use crate::fault::{Classified, Fault, FaultSource, Level};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::BTreeMap;

const ROOT: &str = "rebound-system";

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

fn policy(ns: &str, name: &str, spec: RecoveryPolicySpec) -> RecoveryPolicy {
    let mut p = RecoveryPolicy::new(name, spec);
    p.metadata.namespace = Some(ns.into());
    p.metadata.generation = Some(1);
    p
}

fn set(ps: &[RecoveryPolicy]) -> PolicySet {
    let mut s = PolicySet::new(ROOT);
    for p in ps {
        s.upsert(p).expect("valid policy");
    }
    s
}

fn classified(level: Level, trusted: bool) -> Classified {
    let mut f = Fault::new(FaultSource::PodExit, "1", now());
    f.pod = Some("llm-worker-0".into());
    f.namespace = Some("team-a".into());
    f.trusted = trusted;
    Classified {
        fault: f,
        level,
        rule: "test".into(),
        escalated_by: None,
    }
}

fn job(ns: &str, labels: &[(&str, &str)], history: Vec<RestartRecord>) -> JobInput {
    JobInput {
        kind: Some(WorkloadKind::PyTorchJob),
        view: JobView {
            kind: "PyTorchJob".into(),
            name: "llm".into(),
            namespace: ns.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        },
        pod_labels: BTreeMap::new(),
        history,
        restart_policy_never: false,
        running: false,
    }
}

fn ago(secs: i64, infrastructure: bool) -> RestartRecord {
    RestartRecord {
        at: now() - chrono::Duration::seconds(secs),
        infrastructure,
        pod_only: false,
        ..Default::default()
    }
}

#[test]
fn restarts_a_covered_job() {
    let s = set(&[policy("team-a", "p", RecoveryPolicySpec::default())]);
    let d = decide_job(
        &classified(Level::RestartJob, false),
        &job("team-a", &[], vec![]),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    assert_eq!(
        d.action,
        Some(JobAction::RestartJob {
            preserve_logs: None
        })
    );
    assert_eq!(d.policy.as_deref(), Some("team-a/p"));
}

#[test]
fn ignore_and_preseparate_do_not_restart() {
    let s = set(&[policy("team-a", "p", RecoveryPolicySpec::default())]);
    for l in [Level::Ignore, Level::PreSeparate] {
        let d = decide_job(
            &classified(l, true),
            &job("team-a", &[], vec![]),
            &s,
            false,
            now(),
        );
        assert_eq!(d.skip, Some(Skip::LevelIgnore), "{l}");
    }
}

#[test]
fn cooldown_by_plain_duration() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            cooldown: Some("5m".into()),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    let d = decide_job(
        &c,
        &job("team-a", &[], vec![ago(60, false)]),
        &s,
        false,
        now(),
    );
    assert_eq!(
        d.skip,
        Some(Skip::Cooldown {
            remaining_secs: 240
        })
    );
    let d = decide_job(
        &c,
        &job("team-a", &[], vec![ago(301, false)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts());
}

#[test]
fn cooldown_by_cel_grows_with_restarts() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            cooldown: Some(r#"job.restarts < 3 ? duration("30s") : duration("5m")"#.into()),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    // Two restarts, last 60s ago: 30s cooldown has passed.
    let d = decide_job(
        &c,
        &job("team-a", &[], vec![ago(3000, false), ago(60, false)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    // Three restarts: 5m cooldown holds.
    let h = vec![ago(4000, false), ago(3000, false), ago(60, false)];
    let d = decide_job(&c, &job("team-a", &[], h), &s, false, now());
    assert!(matches!(d.skip, Some(Skip::Cooldown { .. })), "{d:?}");
}

#[test]
fn budget_counts_job_faults_but_not_hardware_by_default() {
    let spec = |infra| RecoveryPolicySpec {
        cooldown: Some("0s".into()),
        restart_budget: Some(RestartBudget {
            max_restarts: 2,
            window: Some("1h".into()),
            count_infrastructure: infra,
        }),
        ..Default::default()
    };
    let s = set(&[policy("team-a", "p", spec(false))]);
    let h = vec![ago(600, false), ago(300, false)];
    let d = decide_job(
        &classified(Level::RestartJob, false),
        &job("team-a", &[], h.clone()),
        &s,
        false,
        now(),
    );
    assert_eq!(d.skip, Some(Skip::BudgetExhausted { used: 2, max: 2 }));
    // A hardware fault is free of the budget.
    let d = decide_job(
        &classified(Level::Separate, true),
        &job("team-a", &[], h),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    // Past hardware restarts do not use the budget either.
    let d = decide_job(
        &classified(Level::RestartJob, false),
        &job("team-a", &[], vec![ago(600, true), ago(300, true)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    // With countInfrastructure they do.
    let s = set(&[policy("team-a", "p", spec(true))]);
    let d = decide_job(
        &classified(Level::Separate, true),
        &job("team-a", &[], vec![ago(600, true), ago(300, true)]),
        &s,
        false,
        now(),
    );
    assert_eq!(d.skip, Some(Skip::BudgetExhausted { used: 2, max: 2 }));
    // Restarts outside the window are forgotten.
    let s = set(&[policy("team-a", "p", spec(false))]);
    let d = decide_job(
        &classified(Level::RestartJob, false),
        &job("team-a", &[], vec![ago(7200, false), ago(4000, false)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts());
}

#[test]
fn root_default_applies_until_the_namespace_has_its_own() {
    let root = policy(
        ROOT,
        "default",
        RecoveryPolicySpec {
            cooldown: Some("1m".into()),
            ..Default::default()
        },
    );
    let s = set(std::slice::from_ref(&root));
    let mut c = classified(Level::RestartJob, false);
    c.fault.namespace = Some("team-b".into());
    let d = decide_job(&c, &job("team-b", &[], vec![]), &s, false, now());
    assert_eq!(d.policy.as_deref(), Some("rebound-system/default"));
    let local = policy(
        "team-b",
        "own",
        RecoveryPolicySpec {
            dry_run: true,
            ..Default::default()
        },
    );
    let s = set(&[root, local]);
    let d = decide_job(&c, &job("team-b", &[], vec![]), &s, false, now());
    assert_eq!(d.policy.as_deref(), Some("team-b/own"));
    assert_eq!(d.skip, Some(Skip::DryRun));
    assert_eq!(
        d.action,
        Some(JobAction::RestartJob {
            preserve_logs: None
        }),
        "dry run still says what it would do"
    );
}

#[test]
fn most_specific_selector_wins_and_ties_go_by_name() {
    let labels = BTreeMap::from([(
        "kcover.io/cascading-recovery".to_string(),
        "true".to_string(),
    )]);
    let broad = policy("team-a", "a-broad", RecoveryPolicySpec::default());
    let mut specific_spec = RecoveryPolicySpec::default();
    specific_spec.selector.match_labels = labels.clone();
    let specific = policy("team-a", "z-specific", specific_spec.clone());
    let twin = policy("team-a", "b-twin", specific_spec);
    let s = set(&[broad, specific, twin]);
    let d = decide_job(
        &classified(Level::RestartJob, false),
        &job(
            "team-a",
            &[("kcover.io/cascading-recovery", "true")],
            vec![],
        ),
        &s,
        false,
        now(),
    );
    assert_eq!(d.policy.as_deref(), Some("team-a/b-twin"));
    let losers: Vec<_> = d.shadowed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(losers, vec!["team-a/z-specific", "team-a/a-broad"]);
    assert!(d.shadowed[0].1.contains("by name"));
    // Without the label only the broad one matches.
    let d = decide_job(
        &classified(Level::RestartJob, false),
        &job("team-a", &[], vec![]),
        &s,
        false,
        now(),
    );
    assert_eq!(d.policy.as_deref(), Some("team-a/a-broad"));
}

#[test]
fn opt_in_label_on_the_pod_is_enough() {
    let mut spec = RecoveryPolicySpec::default();
    spec.selector
        .match_labels
        .insert("kcover.io/cascading-recovery".into(), "true".into());
    spec.selector.kinds = vec![WorkloadKind::VolcanoJob];
    let s = set(&[policy("team-a", "p", spec)]);
    let mut j = job("team-a", &[], vec![]);
    j.kind = Some(WorkloadKind::VolcanoJob);
    j.pod_labels
        .insert("kcover.io/cascading-recovery".into(), "true".into());
    assert!(decide_job(&classified(Level::RestartJob, false), &j, &s, false, now()).acts());
    j.kind = Some(WorkloadKind::PyTorchJob);
    assert_eq!(
        decide_job(&classified(Level::RestartJob, false), &j, &s, false, now()).skip,
        Some(Skip::NoPolicy)
    );
}

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

#[test]
fn gate_restart_policy_never_and_global_dry_run() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            when: Some(r#"fault.level != "PreSeparate" && job.restarts < 1"#.into()),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    assert!(decide_job(&c, &job("team-a", &[], vec![]), &s, false, now()).acts());
    assert_eq!(
        decide_job(
            &c,
            &job("team-a", &[], vec![ago(9999, false)]),
            &s,
            false,
            now()
        )
        .skip,
        Some(Skip::GateFalse)
    );
    let mut never = job("team-a", &[], vec![]);
    never.restart_policy_never = true;
    assert_eq!(
        decide_job(&c, &never, &s, false, now()).skip,
        Some(Skip::RestartPolicyNever)
    );
    assert_eq!(
        decide_job(&c, &job("team-a", &[], vec![]), &s, true, now()).skip,
        Some(Skip::DryRun)
    );
}

#[test]
fn tenant_event_cannot_restart_another_tenants_job() {
    let s = set(&[policy("team-b", "p", RecoveryPolicySpec::default())]);
    let c = classified(Level::RestartJob, false); // from team-a, untrusted
    assert_eq!(
        decide_job(&c, &job("team-b", &[], vec![]), &s, false, now()).skip,
        Some(Skip::Untrusted)
    );
}

#[test]
fn graded_pod_first_then_job() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            cooldown: Some("0s".into()),
            escalation: Some(GradedEscalation {
                restart_pod_first: true,
                job_after: Some("2m".into()),
            }),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    let d = decide_job(&c, &job("team-a", &[], vec![]), &s, false, now());
    assert_eq!(
        d.action,
        Some(JobAction::RestartPod {
            pod: "llm-worker-0".into(),
            preserve_logs: None
        })
    );
    let pod_restart = RestartRecord {
        at: now() - chrono::Duration::seconds(30),
        infrastructure: false,
        pod_only: true,
        ..Default::default()
    };
    let d = decide_job(
        &c,
        &job("team-a", &[], vec![pod_restart.clone()]),
        &s,
        false,
        now(),
    );
    assert!(
        matches!(
            d.skip,
            Some(Skip::WaitingForPodRestart { remaining_secs: 90 })
        ),
        "{d:?}"
    );
    let old = RestartRecord {
        at: now() - chrono::Duration::seconds(150),
        ..pod_restart
    };
    let d = decide_job(&c, &job("team-a", &[], vec![old]), &s, false, now());
    assert_eq!(
        d.action,
        Some(JobAction::RestartJob {
            preserve_logs: None
        })
    );
    assert!(d.acts());
}

#[test]
fn node_actions_need_trust_respect_the_breaker_and_are_idempotent() {
    let mut e = Engine::new(
        ROOT,
        NodeConfig {
            max_separated: Limit::Count(2),
            ..Default::default()
        },
        100,
    );
    let fault = |node: &str, trusted| {
        let mut f = Fault::new(FaultSource::NvidiaXid, "79", now());
        f.node = Some(node.into());
        f.trusted = trusted;
        f
    };
    // No classification: XID 79 gets the built-in RestartJob; add one.
    let mut fc = crate::api::FaultClassification::new(
        "x",
        crate::api::FaultClassificationSpec {
            source: FaultSource::NvidiaXid,
            priority: 0,
            rules: vec![crate::api::ClassificationRule {
                name: "bus".into(),
                codes: vec!["79".into()],
                when: None,
                level: Level::Separate,
                description: None,
            }],
            escalations: vec![],
            default_level: None,
        },
    );
    fc.metadata.generation = Some(1);
    e.classifier.upsert(&fc).unwrap();
    let n = |name: &str| NodeInput {
        name: name.into(),
        ..Default::default()
    };
    let d = e.decide(fault("a", false), Some(&n("a")), None, &[], now());
    assert_eq!(d.node.as_ref().unwrap().skip, Some(Skip::Untrusted));
    for name in ["a", "b"] {
        let d = e.decide(fault(name, true), Some(&n(name)), None, &[], now());
        let nd = d.node.unwrap();
        assert!(nd.acts(), "{nd:?}");
        assert_eq!(
            nd.actions,
            vec![
                NodeAction::Cordon,
                NodeAction::Taint {
                    key: "rebound.dev/separated".into()
                }
            ]
        );
    }
    let d = e.decide(fault("c", true), Some(&n("c")), None, &[], now());
    assert_eq!(
        d.node.unwrap().skip,
        Some(Skip::BreakerOpen {
            used: 2,
            allowed: 2
        })
    );
    let done = NodeInput {
        name: "a".into(),
        unschedulable: true,
        tainted: true,
        cordoned_by_rebound: Some(Level::Separate),
    };
    let d = e.decide(fault("a", true), Some(&done), None, &[], now());
    assert_eq!(d.node.unwrap().skip, Some(Skip::AlreadyApplied));
}

#[test]
fn a_budget_larger_than_the_kept_history_is_refused() {
    let budget = |n: u32| {
        policy(
            "team-a",
            &format!("budget-{n}"),
            RecoveryPolicySpec {
                restart_budget: Some(RestartBudget {
                    max_restarts: n,
                    window: None,
                    count_infrastructure: false,
                }),
                ..Default::default()
            },
        )
    };
    let mut s = PolicySet::new(ROOT);
    // The most the history can show is accepted...
    assert!(s.upsert(&budget(KEPT_RESTARTS as u32)).is_ok());
    // ...one more could never be used up: refused with the reason.
    let e = s.upsert(&budget(KEPT_RESTARTS as u32 + 1)).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.reason),
        ("spec.restartBudget.maxRestarts", "InvalidBudget")
    );
    assert!(e.message.contains("never be used up"), "{}", e.message);
    // And the CRD's schema says the same to kubectl.
    let schema = serde_json::to_value(schemars::schema_for!(RestartBudget)).unwrap_or_default();
    assert_eq!(
        schema["properties"]["maxRestarts"]["maximum"],
        serde_json::json!(KEPT_RESTARTS)
    );
}
