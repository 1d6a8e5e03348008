//! What a policy's CEL sees: `node` is the fault's node (with this fault
//! on it), and expressions that read no variable are evaluated as written.

use super::*;
use crate::expr::NodeView;

fn with(when: Option<&str>, cooldown: Option<&str>) -> PolicySet {
    set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            when: when.map(Into::into),
            cooldown: cooldown.map(Into::into),
            ..Default::default()
        },
    )])
}

/// XID 79 (Separate) on gpu-7, from a trusted source.
fn xid79() -> Classified {
    let mut f = Fault::new(FaultSource::NvidiaXid, "79", now());
    f.node = Some("gpu-7".into());
    f.device = Some("3".into());
    f.trusted = true;
    Classified {
        fault: f,
        level: Level::Separate,
        rule: "test".into(),
        escalated_by: None,
    }
}

fn gpu7(labels: &[(&str, &str)], level: Option<Level>, faults: &[&str]) -> NodeView {
    NodeView {
        name: "gpu-7".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        level,
        faults: faults.iter().map(|f| f.to_string()).collect(),
    }
}

fn skip_of(s: &PolicySet, c: &Classified, node: Option<&NodeView>, j: &JobInput) -> Option<Skip> {
    decide_job(c, node, j, s, false, now()).skip
}

#[test]
fn node_is_the_faults_node_with_its_labels_level_and_faults() {
    let c = xid79();
    let prior = gpu7(&[("zone", "a")], Some(Level::PreSeparate), &["94"]);
    let j = job("team-a", &[], vec![]);
    // Each field as docs/cel.md describes it: the node's name and labels,
    // its level raised by this fault, its faults with this one added.
    for when in [
        r#"node.name == "gpu-7""#,
        r#"node.labels["zone"] == "a""#,
        r#"node.level == "Separate""#,
        r#"node.faults == ["94", "79"]"#,
    ] {
        let s = with(Some(when), None);
        assert_eq!(skip_of(&s, &c, Some(&prior), &j), None, "{when}");
    }
    // Without a prior view the node is still the fault's, at its level.
    let s = with(
        Some(r#"node.name == "gpu-7" && node.level == "Separate" && node.faults == ["79"]"#),
        None,
    );
    assert_eq!(skip_of(&s, &c, None, &j), None);
    // The node is not reported as healthy (it was, whatever the fault).
    let s = with(Some(r#"node.level == "Ignore""#), None);
    assert_eq!(skip_of(&s, &c, None, &j), Some(Skip::GateFalse));
}

#[test]
fn an_untrusted_fault_does_not_raise_the_nodes_level() {
    // A tenant's exit on gpu-7 is not a fault of the node.
    let mut c = classified(Level::RestartJob, false);
    c.fault.node = Some("gpu-7".into());
    let s = with(
        Some(r#"node.name == "gpu-7" && node.level == "Ignore" && size(node.faults) == 0"#),
        None,
    );
    assert_eq!(skip_of(&s, &c, None, &job("team-a", &[], vec![])), None);
    // ... but the node's own level, as known, stays.
    let prior = gpu7(&[], Some(Level::ResetDevice), &["48"]);
    let s = with(
        Some(r#"node.level == "ResetDevice" && node.faults == ["48"]"#),
        None,
    );
    assert_eq!(
        skip_of(&s, &c, Some(&prior), &job("team-a", &[], vec![])),
        None
    );
}

#[test]
fn the_documented_hardware_gate_holds_a_recent_restart_on_a_faulty_node() {
    // docs/cel.md: not again within ten minutes while the node is faulty.
    let s = with(
        Some(
            r#"!(node.level in ["ResetDevice", "Separate"] && now - job.lastRestart < duration("10m"))"#,
        ),
        Some("0s"),
    );
    let c = xid79();
    let recent = job("team-a", &[], vec![ago(300, true)]);
    assert_eq!(skip_of(&s, &c, None, &recent), Some(Skip::GateFalse));
    let old = job("team-a", &[], vec![ago(900, true)]);
    assert_eq!(skip_of(&s, &c, None, &old), None);
}

#[test]
fn a_when_that_reads_no_variable_is_evaluated() {
    let c = classified(Level::RestartJob, false);
    let j = job("team-a", &[], vec![]);
    for when in ["false", "1 == 2", "!true"] {
        let d = decide_job(&c, None, &j, &with(Some(when), None), false, now());
        assert_eq!(d.skip, Some(Skip::GateFalse), "when: {when}");
        assert!(!d.acts(), "when: {when}");
    }
    for when in ["true", "1 == 1"] {
        assert_eq!(
            skip_of(&with(Some(when), None), &c, None, &j),
            None,
            "when: {when}"
        );
    }
    // A constant that is not a bool is an error, not a match.
    assert!(matches!(
        skip_of(&with(Some("1"), None), &c, None, &j),
        Some(Skip::GateError { .. })
    ));
}

#[test]
fn constant_cooldowns_hold_before_and_after_restarts() {
    let c = classified(Level::RestartJob, false);
    for cooldown in ["600", r#""10m""#, r#"duration("10m")"#] {
        let s = with(None, Some(cooldown));
        // Never restarted: no cooldown to wait for.
        assert_eq!(
            skip_of(&s, &c, None, &job("team-a", &[], vec![])),
            None,
            "{cooldown}"
        );
        // Restarted a minute ago: nine minutes left.
        assert_eq!(
            skip_of(&s, &c, None, &job("team-a", &[], vec![ago(60, false)])),
            Some(Skip::Cooldown {
                remaining_secs: 540
            }),
            "{cooldown}"
        );
        // Restarted eleven minutes ago: it has passed.
        assert_eq!(
            skip_of(&s, &c, None, &job("team-a", &[], vec![ago(660, false)])),
            None,
            "{cooldown}"
        );
    }
}

#[test]
fn a_namespace_whose_expressions_cost_too_much_time_is_suspended_alone() {
    let spec = |when: &str| RecoveryPolicySpec {
        when: Some(when.into()),
        ..Default::default()
    };
    // A budget no evaluation fits in: the first one uses it up.
    let mut s = PolicySet::new(ROOT).with_cel_budget(std::time::Duration::from_nanos(1));
    for p in [
        policy("team-a", "p", spec("true")),
        policy("team-b", "p", spec("true")),
        policy(ROOT, "default", spec("true")),
    ] {
        s.upsert(&p).expect("valid policy");
    }
    // A pod exit each tenant's own (a pod fault is its namespace's).
    let c = classified(Level::RestartJob, false);
    let fault_in = |ns: &str| {
        let mut c = c.clone();
        c.fault.namespace = Some(ns.into());
        c
    };
    let a = job("team-a", &[], vec![]);
    assert_eq!(skip_of(&s, &c, None, &a), None, "evaluated within budget");
    assert!(s.cel_suspended("team-a").is_some(), "and that used it up");
    match skip_of(&s, &c, None, &a) {
        Some(Skip::GateError { error }) => assert!(error.contains("suspended"), "{error}"),
        other => panic!("team a's gate is not evaluated while suspended: {other:?}"),
    }
    // Another tenant is evaluated as before (and is then suspended on its
    // own); the root namespace's policies are not metered.
    let b = job("team-b", &[], vec![]);
    assert_eq!(skip_of(&s, &fault_in("team-b"), None, &b), None);
    let other = job("team-c", &[], vec![]);
    for _ in 0..3 {
        assert_eq!(
            skip_of(&s, &fault_in("team-c"), None, &other),
            None,
            "the root policy"
        );
    }
    assert!(s.cel_suspended(ROOT).is_none());
}
