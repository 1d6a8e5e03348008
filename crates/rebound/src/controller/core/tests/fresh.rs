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
        .partition(|e| matches!(e.kind, EffectKind::ReadRecords { .. }));
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
    // The new term's read: the JobSets' list answers, the PyTorchJobs'
    // fails.
    let reads = take_reads(&mut b);
    assert_eq!(reads.len(), 1);
    let _ = b.m.apply(&reads[0]);
    let answers: Vec<Input> =
        b.m.answers
            .drain(..)
            .filter(|a| {
                matches!(
                    a,
                    Input::Records {
                        kind: WorkloadKind::JobSet,
                        ..
                    }
                )
            })
            .collect();
    assert_eq!(answers.len(), 1);
    b.feed(answers);
    // A JobSet's pod fails at once: it is restarted without waiting for
    // the PyTorchJobs.
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1, "the JobSet is not held by the PyTorchJobs");
    assert_eq!(timeouts(&b), 0);
}
