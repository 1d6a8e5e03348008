//! Skipped restarts are said (a `RestartSkipped` Event on the job for every
//! reason docs/events.md gives one), once per job and reason however often
//! a crash loop is decided; and the policy's CEL sees the fault's node.

use super::super::effect::{About, EffectKind};
use super::bed::Bed;
use super::model::{self, Model};
use crate::recover::reasons;
use serde_json::Value;

/// The notes of the Events with `reason` written so far.
fn notes(b: &Bed, reason: &str) -> Vec<String> {
    b.log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::Event {
                about: About::Job(_),
                notice,
            } if notice.reason == reason => Some(notice.note.clone()),
            _ => None,
        })
        .collect()
}

/// Decisions counted in the metrics with this outcome.
fn decided(b: &Bed, outcome: &str) -> u64 {
    let l = crate::metrics::DecisionLabels {
        action: "none".into(),
        outcome: outcome.into(),
    };
    let jobs = crate::metrics::DecisionLabels {
        action: "restart_job".into(),
        ..l.clone()
    };
    // One guard at a time: a family's guard held across another
    // get_or_create deadlocks.
    let none = b.core.metrics.decisions.get_or_create(&l).get();
    let restart = b.core.metrics.decisions.get_or_create(&jobs).get();
    none + restart
}

fn spec_with(extra: &[(&str, Value)]) -> Value {
    let mut s = model::default_policy_spec();
    for (k, v) in extra {
        s[*k] = v.clone();
    }
    s
}

#[test]
fn a_false_gate_is_said_once_however_often_the_job_fails() {
    // One job of four pods; its pods fail one after another.
    let mut b = Bed::on(
        Model::new(2, 1, 4),
        Some(spec_with(&[("when", "false".into())])),
    );
    for _ in 0..4 {
        b.m.fail_pod(0);
        b.pump();
        b.pass(2);
    }
    assert_eq!(b.restarts(), 0, "`when: 'false'` restarts nothing");
    // The positive control: every failure was decided (and counted).
    assert_eq!(decided(&b, "GateFalse"), 4);
    let said = notes(&b, reasons::RESTART_SKIPPED);
    assert_eq!(said.len(), 1, "one Event for the crash loop: {said:?}");
    assert!(said[0].starts_with("GateFalse: "), "{said:?}");
    assert!(said[0].contains("`false`"), "{said:?}");
}

#[test]
fn a_cooldown_is_said_once_an_episode_and_the_job_restarts_when_it_ends() {
    let mut b = Bed::on(Model::new(2, 1, 4), None);
    // The first failure restarts the job: its cooldown starts.
    b.m.fail_pod(0);
    b.pump();
    assert_eq!(b.restarts(), 1);
    b.m.operator();
    b.pass(5);
    // Two more failures within the cooldown: held, said once.
    b.m.fail_pod(0);
    b.pump();
    b.pass(5);
    b.m.fail_pod(1);
    b.pump();
    b.pass(5);
    assert_eq!(b.restarts(), 1, "held by the cooldown");
    let said = notes(&b, reasons::RESTART_SKIPPED);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("Cooldown: ") && said[0].contains("in cooldown"),
        "{said:?}"
    );
    // It ends: the held failure restarts the job.
    b.pass(model::COOLDOWN);
    assert_eq!(b.restarts(), 2, "restarted once the cooldown ended");
    // A new episode: the next cooldown is said again.
    b.m.operator();
    b.pass(5);
    b.m.fail_pod(0);
    b.pump();
    let said = notes(&b, reasons::RESTART_SKIPPED);
    assert_eq!(said.len(), 2, "{said:?}");
}

#[test]
fn the_policy_sees_the_faults_node_and_its_level() {
    // XID 79 on n0 (Separate): a gate on the node's name and level holds
    // for the job there; one that takes the node for healthy does not.
    let gate = r#"node.name == "n0" && node.level == "Separate" && "79" in node.faults"#;
    let mut b = Bed::on(
        Model::new(1, 1, 1),
        Some(spec_with(&[("when", gate.into())])),
    );
    b.m.node_fault("n0", "79");
    b.pump();
    assert_eq!(b.restarts(), 1, "the gate on node n0 at Separate holds");
    let mut b = Bed::on(
        Model::new(1, 1, 1),
        Some(spec_with(&[("when", r#"node.level == "Ignore""#.into())])),
    );
    b.m.node_fault("n0", "79");
    b.pump();
    assert_eq!(b.restarts(), 0);
    assert_eq!(
        b.cordons(),
        1,
        "the node is still separated (positive control)"
    );
    let said = notes(&b, reasons::RESTART_SKIPPED);
    assert!(said.iter().any(|n| n.starts_with("GateFalse")), "{said:?}");
}
