//! Every recovery ends released, leadership is a term, relists pause only
//! what reads their kind (issue #22): driven through the core's inputs
//! against the model cluster with in-place wiring.

use super::super::effect::EffectKind;
use super::super::input::{Change, Input};
use super::bed::Bed;
use super::model::{self, KINDS};
use crate::api::WorkloadKind;
use serde_json::{Value, json};

/// The root policy with in-place restarts: `tiers` and `fallback`.
fn in_place(tiers: &[&str], fallback: &str) -> Value {
    let mut p = model::default_policy_spec();
    p["restart"] = json!({"tiers": tiers, "fallbackAfter": fallback});
    p
}

/// A bed whose pods are wired, its agents past the barrier.
fn wired(spec: Value) -> Bed {
    let mut b = Bed::new(Some(spec));
    b.m.wire_all();
    b.pump();
    b
}

fn releases(b: &Bed) -> usize {
    b.count(|k| matches!(k, EffectKind::Release { .. }))
}

/// The node of j0's `k`-th pod.
fn node_of_j0(b: &Bed, k: usize) -> String {
    let pods: Vec<&Value> =
        b.m.pods
            .values()
            .filter(|p| p["metadata"]["labels"][model::JOBSET_NAME] == "j0")
            .collect();
    pods[k % pods.len()]["spec"]["nodeName"]
        .as_str()
        .unwrap_or("n0")
        .to_string()
}

/// A software XID under a pod of j0 (its pods keep running) and the
/// in-place restart that raises the generation.
fn restart_in_place(b: &mut Bed) {
    let node = node_of_j0(b, 0);
    b.m.node_fault(&node, "13");
    b.pump();
    let (current, released) = b.m.released("j0");
    assert!(
        current > released,
        "the generation is raised and held: {current}/{released}"
    );
    assert_eq!(b.restarts(), 0, "in place, no recreate");
}

#[test]
fn an_in_place_restart_whose_agents_reach_the_barrier_is_released() {
    // The success path, with the agents doing their part: released once.
    let mut b = wired(in_place(&["InPlace", "Recreate"], "2m"));
    restart_in_place(&mut b);
    b.m.agents(true);
    b.pump();
    let (current, released) = b.m.released("j0");
    assert_eq!(current, released, "released");
    assert_eq!(releases(&b), 1);
    b.m.agents(true);
    b.pass(5);
    assert_eq!(
        b.core.recoveries(),
        0,
        "the recovery ended when the job ran again"
    );
    assert_eq!(releases(&b), 1, "released once");
}

#[test]
fn a_long_fallback_time_still_falls_back_before_giving_up() {
    // fallbackAfter 15m: the give-up time used to equal the fallback
    // deadline and was checked first, so no fallback happened at all.
    let mut b = wired(in_place(&["InPlace", "Recreate"], "15m"));
    restart_in_place(&mut b);
    b.m.agents(false);
    b.pump();
    b.pass(15 * 60 + 2);
    assert_eq!(b.restarts(), 1, "fell back to Recreate");
    let (current, released) = b.m.released("j0");
    assert_eq!(
        current, released,
        "the recreate's record releases the generation"
    );
}

#[test]
fn a_tier_list_without_recreate_ends_released() {
    let mut b = wired(in_place(&["InPlace"], "1m"));
    restart_in_place(&mut b);
    b.m.agents(false);
    b.pump();
    b.pass(60 + 2);
    assert_eq!(b.restarts(), 0, "no further tier: nothing recreated");
    assert_eq!(b.core.recoveries(), 0, "the recovery ended");
    let (current, released) = b.m.released("j0");
    assert_eq!(current, released, "its barrier does not stay closed");
    assert_eq!(releases(&b), 1);
    // And a later fault of the same job restarts it afresh, in place.
    b.pass(61);
    b.m.agents(true);
    b.pump();
    let other = node_of_j0(&b, 1);
    b.m.node_fault(&other, "13");
    b.pump();
    let (again, _) = b.m.released("j0");
    assert_eq!(again, current + 1, "a new restart after the one that ended");
}

#[test]
fn a_controller_down_past_the_fallback_time_releases_or_falls_back_on_restart() {
    for (tiers, recreated) in [(&["InPlace"][..], 0), (&["InPlace", "Recreate"][..], 1)] {
        let mut b = wired(in_place(tiers, "1m"));
        restart_in_place(&mut b);
        b.m.agents(false);
        // The controller dies before the release and is down 20 minutes.
        b.queue.clear();
        b.m.t += 20 * 60;
        b.core = model::core();
        let mut ins = b.m.startup();
        ins.push(Input::Leader(true, 2));
        b.feed(ins);
        b.pump();
        // (With in place alone the fault, still present, is decided again
        // once the resumed recovery ends: a new generation, which ends
        // released too when its agents do not come back.)
        b.pass(2 * 60 + 5);
        assert_eq!(b.restarts(), recreated, "tiers {tiers:?}");
        let (current, released) = b.m.released("j0");
        assert_eq!(
            current, released,
            "tiers {tiers:?}: the barrier is not left closed"
        );
    }
}

/// A pod of j0 fails and the core decides its restart: the effects wait
/// in the bed's queue, not carried out.
fn fail_and_decide(b: &mut Bed) {
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    for k in KINDS {
        let ins = b.m.deliver(k, 10_000);
        b.feed(ins);
    }
}

#[test]
fn leadership_lost_and_regained_drops_the_recoveries_of_the_old_term() {
    let mut b = Bed::new(None);
    fail_and_decide(&mut b);
    assert_eq!(b.restarts(), 1, "the restart left");
    // Its answer comes back NotLeader: leadership lapsed meanwhile; another
    // replica restarts the job (the same decision) and records it.
    let sent = std::mem::take(&mut b.queue);
    b.feed(vec![Input::Leader(false, 1)]);
    for e in &sent {
        let _ = b.m.apply(e);
    }
    for e in &sent {
        b.feed(vec![Input::Done(
            e.id,
            super::super::effect::Outcome::NotLeader,
        )]);
    }
    b.pump();
    // This replica leads again, in a new term: nothing of the old term
    // is acted on again; the restart in the job's history covers the
    // fault.
    b.feed(vec![Input::Leader(true, 2)]);
    b.pump();
    b.pass(5);
    assert_eq!(b.restarts(), 1, "no second restart of the same fault");
    assert!(
        b.log
            .iter()
            .all(|e| e.term == 1 || !matches!(e.kind, EffectKind::RestartJob { .. })),
        "no restart in the new term"
    );
}

#[test]
fn a_lapse_noticed_only_as_a_new_term_drops_the_old_recoveries_too() {
    // The leadership channel folded a lapse and a renew into one `true`:
    // the new term alone says leadership was lost.
    let mut b = Bed::new(None);
    fail_and_decide(&mut b);
    assert_eq!(b.core.recoveries(), 1);
    let sent = std::mem::take(&mut b.queue);
    b.feed(vec![Input::Leader(true, 2)]);
    b.answer_reads();
    assert_eq!(
        b.core.recoveries(),
        1,
        "rebuilt in the new term once its records are read"
    );
    for e in &sent {
        b.feed(vec![Input::Done(
            e.id,
            super::super::effect::Outcome::NotLeader,
        )]);
    }
    b.pump();
    assert_eq!(
        b.restarts(),
        2,
        "the new term decided the restart again, once"
    );
    assert!(
        b.log
            .iter()
            .any(|e| e.term == 2 && matches!(e.kind, EffectKind::RestartJob { .. }))
    );
    b.pass(5);
    assert_eq!(b.restarts(), 2, "and only once");
}

#[test]
fn an_events_relist_does_not_hold_a_recovery() {
    let mut b = Bed::new(None);
    // A cluster-wide Events relist (after a 410) is under way.
    b.feed(vec![Input::Event(Change::Relist)]);
    assert!(b.core.ready());
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1, "restarted during the Events relist");
    // A pods relist holds new decisions until it ends, then they go on.
    b.feed(vec![Input::Pod(Change::Relist)]);
    let i = b.pod_index("j1");
    b.m.fail_pod(i);
    let ins = b.m.deliver(model::Kind::Pods, 10_000);
    b.feed(ins);
    assert_eq!(b.restarts(), 1, "held while pods are relisted");
    b.feed(vec![Input::Pod(Change::Synced)]);
    b.pass(2);
    assert_eq!(b.restarts(), 2, "decided once the relist ended");
}

#[test]
fn a_removed_job_kind_leaves_the_core_ready() {
    let mut b = Bed::new(None);
    // The JobSet CRD is deleted while its watch relists: the relist never
    // ends, discovery reports the kind gone.
    b.feed(vec![Input::Job(WorkloadKind::JobSet, Change::Relist)]);
    b.feed(vec![Input::JobKinds(Vec::new())]);
    assert!(b.core.ready(), "a removed kind leaves the core ready");
    // And when the kind comes back, it is waited for again until listed.
    b.feed(vec![Input::JobKinds(vec![(
        WorkloadKind::JobSet,
        model::jobset_resource(),
    )])]);
    assert!(!b.core.ready(), "a kind installed again is listed first");
    let ins = b.m.relist(model::Kind::Jobs);
    b.feed(ins);
    assert!(b.core.ready());
}

#[test]
fn a_pod_ended_under_restart_policy_never_is_replaced_not_restarted_in_place() {
    let mut b = wired(in_place(&["InPlace", "ReplaceFaulty", "Recreate"], "2m"));
    // The worker exits 1 under `restartPolicy: Never`: the pod is Failed,
    // the kubelet restarts nothing in it.
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    let deleted = b.count(|k| matches!(k, EffectKind::DeletePods { .. }));
    assert_eq!(deleted, 1, "the ended pod is replaced");
    assert_eq!(b.restarts(), 0, "the others are not recreated");
    let (current, released) = b.m.released("j0");
    assert!(current > released, "the others restart in place");
}

#[test]
fn an_in_place_restart_that_would_fail_the_job_by_its_backoff_limit_is_not_chosen() {
    for (limit, stays) in [(100, true), (3, false)] {
        let mut b = wired(in_place(&["InPlace", "Recreate"], "2m"));
        // The JobSet's workers count container restarts (OnFailure):
        // 2 pods of 2 containers (worker, agent) add 4.
        if let Some(j) = b.m.jobs.get_mut("j0") {
            j["spec"]["replicatedJobs"][0]["template"]["spec"] = json!({"backoffLimit": limit,
                "template": {"spec": {"restartPolicy": "OnFailure"}}});
        }
        b.m.touch_job("j0");
        b.pump();
        let node = node_of_j0(&b, 0);
        b.m.node_fault(&node, "13");
        b.pump();
        let (current, released) = b.m.released("j0");
        assert_eq!(current > released, stays, "backoffLimit {limit}: in place");
        assert_eq!(b.restarts() > 0, !stays, "backoffLimit {limit}: recreated");
    }
}

#[test]
fn a_failed_delete_of_a_node_lost_during_an_in_place_restart_is_tried_again() {
    let mut b = wired(in_place(&["InPlace", "ReplaceFaulty", "Recreate"], "2m"));
    restart_in_place(&mut b);
    b.m.agents(false);
    b.pump();
    // A node of j0 fails (bus off) during the restart: its pod is deleted
    // beside the recovery's steps, and that delete fails.
    let node = node_of_j0(&b, 1);
    b.m.node_fault(&node, "79");
    for k in KINDS {
        let ins = b.m.deliver(k, 10_000);
        b.feed(ins);
    }
    let deletes = |b: &Bed| {
        b.log
            .iter()
            .filter(|e| matches!(&e.kind, EffectKind::DeletePods { job, .. } if job.name == "j0"))
            .count()
    };
    assert_eq!(deletes(&b), 1, "the lost node's pod deleted");
    let sent = std::mem::take(&mut b.queue);
    for e in sent {
        let o = if matches!(e.kind, EffectKind::DeletePods { .. }) {
            super::super::effect::Outcome::Failed("503".into())
        } else {
            b.m.apply(&e)
        };
        b.feed(vec![Input::Done(e.id, o)]);
    }
    b.pump();
    // Tried again after its backoff, and done then.
    b.pass(3);
    assert_eq!(deletes(&b), 2, "the failed delete is tried again");
    b.pass(10);
    assert_eq!(deletes(&b), 2, "and not again once done");
}
