//! Exactly once across fail-over, and no fault lost (issue 27): a
//! restart is keyed by its occurrence in the job's own record, its
//! cooldown holds from the decision, and a restart never made goes back
//! to pending.

use super::super::effect::EffectKind;
use super::super::input::Input;
use super::bed::Bed;
use super::model::{self, Applied, Model};

fn made_restarts(b: &Bed) -> usize {
    b.m.applied
        .iter()
        .filter(|a| matches!(a, Applied::Restart { .. }))
        .count()
}

/// The controller process restarts: a new core lists everything and
/// leads in a new term.
fn controller_restart(b: &mut Bed, term: u64) {
    b.core = model::core();
    b.queue.clear();
    let mut ins = b.m.startup();
    ins.push(Input::Leader(true, term));
    b.feed(ins);
    b.pump();
}

#[test]
fn a_fault_restarted_within_its_own_second_is_not_restarted_again_after_a_controller_restart() {
    // One node, one job: an app XID on the node restarts the job in the
    // same second the fault happened.
    let mut b = Bed::on(Model::new(1, 1, 1), None);
    b.m.node_fault("n0", "13");
    b.pump();
    assert_eq!(b.restarts(), 1);
    b.m.operator();
    b.pump();
    // The controller restarts while the line stays on the node, and the
    // cooldown ends.
    controller_restart(&mut b, 2);
    b.m.operator();
    b.pass(model::COOLDOWN + 5);
    let after_cooldown = b.restarts();
    // Positive control: a new occurrence (another GPU) is restarted.
    b.m.node_fault_on("n0", "13", "1");
    b.pump();
    assert_eq!(
        after_cooldown, 1,
        "the occurrence restarted before the controller restart is not restarted again"
    );
    assert_eq!(b.restarts(), after_cooldown + 1, "a new fault restarts");
}

#[test]
fn a_restart_whose_record_never_lands_still_holds_its_cooldown() {
    let mut spec = model::default_policy_spec();
    spec["cooldown"] = serde_json::json!("10m");
    let mut b = Bed::new(Some(spec));
    b.refuse = |k| matches!(k, EffectKind::Record { .. });
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(made_restarts(&b), 1, "the delete was made");
    // Every record write fails: the recovery gives up after its retries.
    b.m.operator();
    b.pass(300);
    b.refuse = |_| false;
    // j0 fails again within its cooldown.
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    b.pass(60);
    let within = made_restarts(&b);
    // Positive control: once the cooldown (from the decision) ends, the
    // held failure restarts j0.
    b.pass(300);
    assert_eq!(made_restarts(&b), 2, "restarted when the cooldown ended");
    assert_eq!(within, 1, "no restart within the cooldown");
}

#[test]
fn a_restart_that_keeps_failing_is_decided_again_not_lost() {
    let mut b = Bed::new(None);
    b.refuse = |k| matches!(k, EffectKind::RestartJob { .. });
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    // An API brownout longer than the retries (about 4 minutes).
    b.pass(400);
    assert_eq!(made_restarts(&b), 0);
    assert!(
        b.log
            .iter()
            .any(|e| matches!(&e.kind, EffectKind::Event { notice, .. }
            if notice.note.contains("decided again"))),
        "an Event says the fault waits"
    );
    b.refuse = |_| false;
    // Decided again once its last request can no longer land (the
    // requeue's wait), and judged not made: its pods are all there.
    b.pass(240);
    assert_eq!(
        made_restarts(&b),
        1,
        "the fault is restarted once the API answers"
    );
}
