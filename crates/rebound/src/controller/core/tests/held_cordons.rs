//! Restarts and held cordons agree (issue 32 item 3): a job on a node whose
//! cordon the circuit breaker holds back is not restarted onto that node
//! again: its restart waits for the cordon, and once the cordon is made
//! every job still on the node is restarted, also one that landed there
//! after the fault.

use super::super::effect::EffectKind;
use super::bed::Bed;
use super::model::{self, Model};
use crate::recover::reasons;
use serde_json::json;

/// Job name → nodes of its live pods.
fn placement(b: &Bed) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        b.m.pods
            .values()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                (
                    p["metadata"]["labels"][model::JOBSET_NAME]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
    out.sort();
    out
}

fn restarts_of(b: &Bed, job: &str) -> usize {
    b.count(|k| matches!(k, EffectKind::RestartJob { job: j, .. } if j.name == job))
}

fn skipped_notes(b: &Bed, job: &str) -> Vec<String> {
    b.job_notes(job, reasons::RESTART_SKIPPED)
}

#[test]
fn a_restart_waits_for_its_held_cordon_and_no_pod_is_left_on_the_faulty_node() {
    // 4 nodes, 3 jobs of one pod each; the breaker allows 2 cordons in
    // its window.
    let mut b = Bed::on(Model::new(4, 3, 1), None);
    let at_start = placement(&b);
    let nodes: Vec<String> = at_start.iter().map(|(_, n)| n.clone()).collect();
    let mut distinct = nodes.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "one job a node: {at_start:?}");
    let (a, bb, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let held_job = at_start[2].0.clone();
    // Two nodes fail and are cordoned; their jobs restart.
    b.m.node_fault(a, "79");
    b.m.node_fault(bb, "79");
    b.pump();
    assert_eq!(b.cordons(), 2);
    assert_eq!(b.restarts(), 2, "the jobs on the cordoned nodes");
    // A third: its cordon is held, and so is its job's restart.
    b.m.t += 1;
    b.m.node_fault(c, "79");
    b.pump();
    assert_eq!(b.cordons(), 2, "the breaker holds the third cordon");
    assert_eq!(
        restarts_of(&b, &held_job),
        0,
        "not restarted onto {c} again"
    );
    let notes = skipped_notes(&b, &held_job);
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("CordonHeld") && n.contains(c.as_str())),
        "{notes:?}"
    );
    // The restarted jobs come back; with one free node besides the held
    // one, the operator may put one on the faulty node.
    b.m.operator();
    b.pump();
    b.pass(10);
    assert_eq!(restarts_of(&b, &held_job), 0, "still held");
    // The window moves on: the held cordon is made, and every job on the
    // node is restarted, wherever it came from.
    b.pass(model::WINDOW + 10);
    assert_eq!(b.m.nodes[c.as_str()]["spec"]["unschedulable"], json!(true));
    assert_eq!(
        restarts_of(&b, &held_job),
        1,
        "restarted once the cordon is made"
    );
    for _ in 0..3 {
        b.m.operator();
        b.pump();
        b.pass(model::COOLDOWN + 5);
    }
    let now = placement(&b);
    assert!(
        now.iter().all(|(_, n)| n != a && n != bb && n != c),
        "no pod is left on a faulty node: {now:?}"
    );
    assert_eq!(
        restarts_of(&b, &held_job),
        1,
        "and none restarted twice for it"
    );
}

/// The controller process restarts: a new core lists everything and
/// leads in a new term.
fn controller_restart(b: &mut Bed, term: u64) {
    b.core = model::core();
    b.queue.clear();
    let mut ins = b.m.startup();
    ins.push(super::super::input::Input::Leader(true, term));
    b.feed(ins);
    b.answer_reads();
    b.pump();
}

#[test]
fn a_held_cordon_made_before_a_controller_restart_still_moves_the_pods_put_there_meanwhile() {
    let mut b = Bed::on(Model::new(4, 3, 1), None);
    let at_start = placement(&b);
    let nodes: Vec<String> = at_start.iter().map(|(_, n)| n.clone()).collect();
    let (a, bb, c) = (nodes[0].clone(), nodes[1].clone(), nodes[2].clone());
    b.m.node_fault(&a, "79");
    b.m.node_fault(&bb, "79");
    b.pump();
    b.m.t += 1;
    b.m.node_fault(&c, "79");
    b.pump();
    assert_eq!(b.cordons(), 2, "the third cordon is held");
    // The restarted jobs come back a few seconds later; one lands on the
    // held node, after its fault.
    b.m.t += 3;
    b.m.operator();
    b.pump();
    let landed: Vec<String> = placement(&b)
        .into_iter()
        .filter(|(j, n)| *n == c && *j != at_start[2].0)
        .map(|(j, _)| j)
        .collect();
    assert_eq!(
        landed.len(),
        1,
        "a job put on {c} after its fault: {:?}",
        placement(&b)
    );
    let landed = landed[0].clone();
    // The window moves on and the held cordon is made, but no restart
    // (nor its record) goes through before the controller restarts.
    b.refuse = |k| matches!(k, EffectKind::RestartJob { .. } | EffectKind::Record { .. });
    b.pass(model::WINDOW + 10);
    assert_eq!(b.m.nodes[c.as_str()]["spec"]["unschedulable"], json!(true));
    assert_eq!(
        b.m.nodes[c.as_str()]["metadata"]["annotations"][crate::recover::CORDON_HELD_ANNOTATION],
        json!("true"),
        "the hold is recorded on the node"
    );
    let made_before =
        b.m.applied
            .iter()
            .filter(|x| matches!(x, model::Applied::Restart { .. }))
            .count();
    b.refuse = |_| false;
    let mark = b.log.len();
    controller_restart(&mut b, 2);
    b.pass(5);
    let made =
        b.m.applied
            .iter()
            .filter(|x| matches!(x, model::Applied::Restart { .. }))
            .count();
    assert!(made > made_before, "the new term restarts the jobs on {c}");
    for _ in 0..3 {
        b.m.operator();
        b.pump();
        b.pass(model::COOLDOWN + 5);
    }
    let now = placement(&b);
    let after: Vec<String> = b.log[mark..]
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::RestartJob { job, .. } => Some(job.name.clone()),
            _ => None,
        })
        .collect();
    assert!(
        after.contains(&landed),
        "the new term restarted {landed}: {after:?}"
    );
    assert!(
        now.iter().all(|(_, n)| *n != c),
        "{landed}, put on {c} after its fault, moved too: {now:?}"
    );
}
