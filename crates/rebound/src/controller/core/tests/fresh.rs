//! The take-over's fresh read of the jobs' restart records (fresh.rs): a
//! new leader whose jobs' watch is behind what the old leader wrote does
//! not restart a job again; a kind whose list fails holds no other kind,
//! and holds its own jobs at most the read's bound.

use super::super::effect::{Effect, EffectKind};
use super::super::fresh::{ASK_AGAIN, FRESH_BOUND};
use super::super::input::{Change, Input};
use super::bed::Bed;
use super::model::{self, Kind, Model};
use crate::api::WorkloadKind;
use kube::api::ApiResource;

/// The fresh reads in the bed's queue, taken out of it.
fn take_reads(b: &mut Bed) -> Vec<Effect> {
    let (reads, rest): (Vec<Effect>, Vec<Effect>) = std::mem::take(&mut b.queue)
        .into_iter()
        .partition(|e| e.kind.is_fresh_read());
    b.queue = rest;
    reads
}

fn timeouts(b: &Bed) -> usize {
    let text = b.core.metrics.encode();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("rebound_decisions_total")
                && l.contains("action=\"take_over_read\"")
                && l.contains("outcome=\"timeout\"")
        })
        .unwrap_or("");
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The PyTorchJob kind's resource, as the controller names it.
fn pytorchjob_resource() -> ApiResource {
    crate::workload::JobRef::new(WorkloadKind::PyTorchJob, "", "", None).api_resource()
}

#[test]
fn a_new_leader_whose_jobs_watch_is_behind_does_not_restart_what_the_old_leader_restarted() {
    // One node, one job; replica A leads, replica B stands by.
    let mut b = Bed::on(Model::new(1, 1, 1), None);
    let mut standby = model::core();
    let now = b.m.now();
    for i in b.m.startup() {
        standby.step(i, now);
    }
    standby.step(Input::Leader(false, 1), now);
    // An app XID on the node: A restarts the job and records it.
    b.m.node_fault("n0", "13");
    b.pump();
    assert_eq!(b.restarts(), 1);
    b.m.operator();
    b.pump();
    // B's watches of the nodes and pods are up to date; its jobs' watch
    // is behind the record A wrote.
    let now = b.m.now();
    for k in [Kind::Nodes, Kind::Pods] {
        for i in b.m.relist(k) {
            standby.step(i, now);
        }
    }
    // A's Lease runs out: B leads in term 2.
    b.core = standby;
    b.queue.clear();
    b.feed(vec![Input::Leader(true, 2)]);
    assert!(
        b.queue
            .iter()
            .any(|e| matches!(e.kind, EffectKind::ReadRecords { term: 2, .. })),
        "the new term reads the records afresh"
    );
    assert_eq!(b.restarts(), 1, "nothing restarted before the read is in");
    // The read is answered; time passes beyond the read's bound and the
    // cooldown while the line stays on the node.
    b.pump();
    b.pass(FRESH_BOUND.as_secs() as i64 + model::COOLDOWN + 5);
    assert_eq!(
        b.restarts(),
        1,
        "the new leader does not restart the occurrence the old one restarted"
    );
    // Positive control: a new fault (another GPU) restarts the job.
    b.m.node_fault_on("n0", "13", "1");
    b.pump();
    assert_eq!(b.restarts(), 2, "a new fault restarts");
}

#[test]
fn a_kind_whose_list_fails_is_asked_again_and_decided_from_its_watch_after_the_bound() {
    let mut b = Bed::new(None);
    // Every list of the records fails (a dead conversion webhook).
    b.refuse = |k| matches!(k, EffectKind::ReadRecords { .. });
    b.feed(vec![Input::Leader(true, 2)]);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 0, "the restart waits for the read");
    let bound = FRESH_BOUND.as_secs() as i64;
    b.pass(bound - 1);
    assert_eq!(b.restarts(), 0, "the restart waits for the read");
    let reads = b.count(|k| matches!(k, EffectKind::ReadRecords { term: 2, .. }));
    let every = ASK_AGAIN.as_secs() as i64;
    assert!(
        reads as i64 >= bound / every,
        "asked again every {every} s: {reads} reads in {bound} s"
    );
    assert_eq!(timeouts(&b), 0);
    b.pass(2);
    assert_eq!(b.restarts(), 1, "decided from the watch past the bound");
    assert_eq!(timeouts(&b), 1, "the give-up is counted");
    // Given up: not asked again in this term.
    let asked = b.count(|k| matches!(k, EffectKind::ReadRecords { .. }));
    b.pass(2 * every);
    assert_eq!(
        b.count(|k| matches!(k, EffectKind::ReadRecords { .. })),
        asked
    );
}

#[test]
fn a_kind_whose_list_fails_does_not_hold_another_kinds_restarts() {
    let mut b = Bed::new(None);
    // PyTorchJobs are installed too (none in the cluster).
    b.feed(vec![
        Input::JobKinds(vec![
            (WorkloadKind::JobSet, model::jobset_resource()),
            (WorkloadKind::PyTorchJob, pytorchjob_resource()),
        ]),
        Input::Job(WorkloadKind::PyTorchJob, Change::Relist),
        Input::Job(WorkloadKind::PyTorchJob, Change::Synced),
    ]);
    b.pump();
    b.feed(vec![Input::Leader(true, 2)]);
    // The new term's reads: the nodes' and the JobSets' lists answer,
    // the PyTorchJobs' fails.
    let reads = take_reads(&mut b);
    assert_eq!(reads.len(), 2, "the nodes and the records");
    for r in &reads {
        let _ = b.m.apply(r);
    }
    let answers: Vec<Input> =
        b.m.answers
            .drain(..)
            .filter(|a| {
                matches!(
                    a,
                    Input::Records {
                        kind: WorkloadKind::JobSet,
                        ..
                    } | Input::Nodes { .. }
                )
            })
            .collect();
    assert_eq!(answers.len(), 2);
    b.feed(answers);
    // A JobSet's pod fails at once: it is restarted without waiting for
    // the PyTorchJobs.
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1, "the JobSet is not held by the PyTorchJobs");
    assert_eq!(timeouts(&b), 0);
}

/// Nodes the model shows out of scheduling.
fn unschedulable(b: &Bed) -> Vec<String> {
    b.m.nodes
        .iter()
        .filter(|(_, n)| n["spec"]["unschedulable"] == serde_json::json!(true))
        .map(|(k, _)| k.clone())
        .collect()
}

#[test]
fn a_new_leader_whose_nodes_watch_is_behind_the_old_leaders_cordons_holds_to_the_breaker() {
    // The model's breaker lets 2 of its 4 nodes be separated in a window.
    let mut b = Bed::new(None);
    let mut standby = model::core();
    let now = b.m.now();
    for i in b.m.startup() {
        standby.step(i, now);
    }
    standby.step(Input::Leader(false, 1), now);
    // Faults on n1 and n2: leader A sends their cordons.
    b.m.node_fault("n1", "79");
    b.m.node_fault("n2", "79");
    let ins = b.m.deliver(Kind::Nodes, 100);
    b.feed(ins);
    // n0 fails before A's cordons land: both replicas see three faulty
    // nodes, none cordoned yet.
    b.m.node_fault("n0", "79");
    let view = b.m.relist(Kind::Nodes);
    b.feed(view.clone());
    let now = b.m.now();
    for i in view.into_iter().chain(b.m.relist(Kind::Pods)) {
        standby.step(i, now);
    }
    b.pump();
    assert_eq!(unschedulable(&b), ["n1", "n2"], "A holds the third");
    // A's Lease runs out. B leads; its nodes watch never delivered A's
    // cordons (it still shows n1 and n2 schedulable).
    b.core = standby;
    b.queue.clear();
    b.feed(vec![Input::Leader(true, 2)]);
    let reads = take_reads(&mut b);
    assert!(
        reads
            .iter()
            .any(|e| matches!(e.kind, EffectKind::ReadNodes { term: 2 })),
        "the new term reads the nodes afresh"
    );
    b.pump();
    assert!(
        !b.queue
            .iter()
            .chain(&b.log)
            .any(|e| e.term == 2 && matches!(e.kind, EffectKind::Cordon { .. })),
        "no cordon before the nodes' read is in"
    );
    // The read is answered: A's two separations are in the window.
    for e in reads {
        let _ = b.m.apply(&e);
    }
    let answers: Vec<Input> = b.m.answers.drain(..).collect();
    b.feed(answers);
    b.pump();
    // The positive control: B decided n0 and held it (the metric), and
    // no third node is out of scheduling.
    let held = b
        .core
        .metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("rebound_breaker_held_nodes"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(held, Some(1.0), "B holds n0");
    assert_eq!(unschedulable(&b), ["n1", "n2"], "never above the breaker");
    // The window moves on: n0 is cordoned then.
    b.pass(model::WINDOW + 10);
    assert_eq!(unschedulable(&b), ["n0", "n1", "n2"]);
}

#[test]
fn a_nodes_read_that_keeps_failing_holds_cordons_at_most_the_bound() {
    let mut b = Bed::new(None);
    b.refuse = |k| matches!(k, EffectKind::ReadNodes { .. });
    b.feed(vec![Input::Leader(true, 2)]);
    b.m.node_fault("n0", "79");
    b.pump();
    let bound = FRESH_BOUND.as_secs() as i64;
    b.pass(bound - 1);
    assert!(
        unschedulable(&b).is_empty(),
        "the cordon waits for the read"
    );
    assert!(
        b.count(|k| matches!(k, EffectKind::ReadNodes { term: 2 })) as i64
            >= bound / ASK_AGAIN.as_secs() as i64,
        "asked again"
    );
    b.pass(2);
    assert_eq!(
        unschedulable(&b),
        ["n0"],
        "decided from the watch past the bound"
    );
    assert_eq!(timeouts(&b), 1, "the give-up is counted");
}
