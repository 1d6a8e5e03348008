//! History that forgets (issue 27): a fault's repeats and duration are
//! counted on its current episode, which ends when its carrier clears.
//! The model classifies XID 13 twice on one GPU within 24 h as
//! ResetDevice (which cordons).

use super::bed::Bed;
use super::model::Model;

#[test]
fn a_repeat_after_the_fault_cleared_is_a_new_episode() {
    let mut b = Bed::on(Model::new(2, 1, 1), None);
    b.m.node_fault("n1", "13");
    b.pump();
    b.m.node_clear("n1");
    b.pump();
    b.pass(120);
    // The same code on the same GPU again, after it cleared: one
    // occurrence of a new episode, not a repeat.
    b.m.node_fault("n1", "13");
    b.pump();
    b.pass(2);
    let cordons_after_new_episode = b.cordons();
    // Positive control: a repeat within the episode (the agent folds it
    // into the line, n=2) escalates and cordons.
    b.m.node_fault("n1", "13");
    b.pump();
    b.pass(2);
    assert_eq!(b.cordons(), 1, "a repeat within one episode escalates");
    assert_eq!(
        cordons_after_new_episode, 0,
        "the fault of a new episode is not a repeat of the cleared one"
    );
}

#[test]
fn a_new_line_seen_only_after_a_relist_is_a_new_episode() {
    // Found by the adversary's episodes invariant: a reader that never
    // saw the node's faults clear (a relist shows only the latest state)
    // must still see the new line (another `at=`) as a new episode.
    let mut b = Bed::on(Model::new(2, 1, 1), None);
    b.m.node_fault("n1", "13");
    b.pump();
    b.pass(120);
    b.m.node_clear("n1");
    b.m.t += 5;
    b.m.node_fault("n1", "13");
    // Neither write reaches the watch; a relist shows the node as it is.
    for q in b.m.queues.values_mut() {
        q.clear();
    }
    let ins = b.m.relist(super::model::Kind::Nodes);
    b.feed(ins);
    b.pump();
    b.pass(2);
    let cordons_after_new_episode = b.cordons();
    // Positive control: a repeat within the new episode escalates.
    b.m.node_fault("n1", "13");
    b.pump();
    b.pass(2);
    assert_eq!(b.cordons(), 1, "a repeat within one episode escalates");
    assert_eq!(
        cordons_after_new_episode, 0,
        "the line that began anew is not a repeat of the cleared one"
    );
}

/// The shipped node-condition classification: NotReady is ResetDevice
/// (restart the node's jobs, cordon) once it lasts 2 minutes.
fn with_node_conditions(b: &mut Bed) {
    let mut loaded = crate::explain::load::Loaded::default();
    for (path, text) in crate::samples::SAMPLES {
        if path.ends_with("node-condition.yaml") {
            crate::explain::load::load_str(std::path::Path::new(path), text, &mut loaded)
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    }
    let ins = loaded
        .classifications
        .into_iter()
        .map(|(_, mut c)| {
            c.metadata.generation = Some(1);
            super::super::input::Input::Classification(super::super::input::Change::Apply(
                Box::new(c),
            ))
        })
        .collect();
    b.feed(ins);
}

#[test]
fn a_brief_not_ready_a_day_after_a_long_one_is_brief() {
    // Case (a) of issue 27, through the core: NotReady for 5 min (jobs
    // restarted, node cordoned), Ready again, then a day later NotReady
    // for 10 s must be brief, as the first one was in its first 2 min.
    let mut b = Bed::on(Model::new(2, 1, 1), None);
    with_node_conditions(&mut b);
    b.m.node_goes_down("n1");
    b.pump();
    b.pass(300);
    assert_eq!(b.cordons(), 1, "5 min NotReady: cordoned");
    b.m.revive_node("n1");
    b.pump();
    b.pass(86_400 / 600);
    b.m.t += 86_400;
    b.m.operator();
    b.pump();
    b.pass(5);
    let before = b.cordons();
    b.m.node_goes_down("n1");
    b.pump();
    b.pass(10);
    let brief = b.cordons() - before;
    // Positive control: the same NotReady, lasting past 2 min, cordons.
    b.pass(120);
    assert!(b.cordons() > before, "a lasting NotReady still cordons");
    assert_eq!(brief, 0, "10 s of NotReady a day later is brief");
}
