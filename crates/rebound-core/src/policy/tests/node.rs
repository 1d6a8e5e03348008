//! The node's decision: trust, the breaker, and idempotence.

use super::*;

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
