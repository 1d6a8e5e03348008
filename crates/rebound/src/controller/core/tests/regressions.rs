//! Regression tests of the defects the core was rebuilt for (issue #13),
//! each driven through the core's inputs against the model cluster, with
//! the success path and the way back.

use super::super::effect::{DeleteAll, Effect, EffectKind, Outcome};
use super::super::input::{Change, Input};
use super::bed::Bed;
use super::model::{self, KINDS, Kind};
use serde_json::json;

#[test]
fn graded_recovery_restarts_the_failed_pod_once_and_leaves_its_healthy_replacement_alone() {
    let mut spec = model::default_policy_spec();
    spec["cooldown"] = json!("0s");
    spec["escalation"] = json!({"restartPodFirst": true, "jobAfter": "10s"});
    let mut b = Bed::new(Some(spec));
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    let deleted: Vec<String> = b
        .log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::DeletePods { pods, .. } => Some(pods[0].uid.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted.len(), 1, "the failed pod, first");
    // The operator recreates it under a new uid; it runs.
    b.m.operator();
    b.pump();
    let replacement: Vec<String> = b.pods_of("j0").into_iter().map(|(_, u)| u).collect();
    assert!(!replacement.contains(&deleted[0]));
    // Long past jobAfter: the job runs, nothing more is deleted.
    b.pass(35);
    assert_eq!(
        b.count(|k| matches!(k, EffectKind::DeletePods { .. })),
        1,
        "the healthy replacement must never be deleted"
    );
    assert_eq!(b.restarts(), 0, "the job ran again: no job restart");
    assert_eq!(b.core.recoveries(), 0, "the recovery ended");
    let mine: Vec<String> = b.pods_of("j0").into_iter().map(|(_, u)| u).collect();
    assert_eq!(mine, replacement, "the replacements still stand");

    // The way back: a replacement that never runs escalates to one job
    // restart after jobAfter.
    let mut spec = model::default_policy_spec();
    spec["cooldown"] = json!("0s");
    spec["escalation"] = json!({"restartPodFirst": true, "jobAfter": "10s"});
    let mut b = Bed::new(Some(spec));
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    b.pass(15);
    assert_eq!(b.restarts(), 1, "not running again by jobAfter: the job");
    b.pass(30);
    assert_eq!(b.restarts(), 1, "once");
}

#[test]
fn a_rewritten_or_heartbeat_condition_is_not_a_repeat_but_a_real_repeat_escalates() {
    let mut b = Bed::new(None);
    // XID 13 on GPU 0 (RestartJob), then XID 31 on GPU 1 is added: the
    // agent rewrites the whole condition; then two heartbeat-only writes.
    b.m.node_fault_on("n0", "13", "0");
    b.pump();
    b.pass(2);
    b.m.node_fault_on("n0", "31", "1");
    b.pump();
    for _ in 0..2 {
        b.pass(10);
        b.m.write_node("n0");
        b.pump();
    }
    b.pass(5);
    assert_eq!(
        b.cordons(),
        0,
        "no escalation of XID 13 to ResetDevice: one occurrence"
    );
    // A real repeat of XID 13 on GPU 0 (the agent folds it: n=2) is a
    // second occurrence: `times: 2 within 24h` makes it ResetDevice.
    b.m.node_fault_on("n0", "13", "0");
    b.pump();
    b.pass(2);
    assert_eq!(b.cordons(), 1, "the repeat escalates and cordons");
}

#[test]
fn failed_cordons_and_restarts_are_retried_until_they_succeed() {
    let mut b = Bed::new(None);
    b.m.node_fault("n1", "79");
    let ins = b.m.deliver(Kind::Nodes, 100);
    b.feed(ins);
    // The cordon first; the restart waits for it (its new pods must not
    // be put on the node before it is cordoned).
    let first = std::mem::take(&mut b.queue);
    assert!(
        first
            .iter()
            .any(|e| matches!(e.kind, EffectKind::Cordon { .. }))
    );
    assert!(
        !first
            .iter()
            .any(|e| matches!(e.kind, EffectKind::RestartJob { .. })),
        "no restart beside the cordon"
    );
    // Every action fails once: the cordon, then the restart.
    for e in first {
        b.feed(vec![Input::Done(e.id, Outcome::Failed("500".into()))]);
    }
    assert_eq!(b.restarts(), 0, "nor after it failed, before it is retried");
    b.refuse = |k| matches!(k, EffectKind::RestartJob { .. });
    b.pass(20);
    assert!(b.cordons() >= 2, "the cordon was retried");
    assert_eq!(b.m.nodes["n1"]["spec"]["unschedulable"], json!(true));
    assert!(b.restarts() >= 1, "restarted once cordoned (refused)");
    b.refuse = |_| false;
    b.pass(40);
    assert!(b.restarts() >= 2, "the restart was retried");
    assert_eq!(b.m.nodes["n1"]["spec"]["unschedulable"], json!(true));
    // The job's operator makes its pods anew; then the recovery ends (its
    // old pods, still in the watch when the retried delete was answered,
    // never count as the job running again).
    assert_eq!(b.core.recoveries(), 1, "the recreated job is followed");
    b.m.operator();
    b.pump();
    b.pass(2);
    assert_eq!(b.core.recoveries(), 0, "the retried recoveries finished");
}

#[test]
fn a_fault_held_for_its_cooldown_is_acted_on_when_the_cooldown_ends() {
    let mut b = Bed::new(None);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1);
    b.m.operator();
    b.pump();
    b.pass(10);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    b.pass(20);
    assert_eq!(b.restarts(), 1, "within the cooldown: held");
    b.pass(40);
    assert_eq!(
        b.restarts(),
        2,
        "the held fault is acted on when the cooldown ends"
    );
}

#[test]
fn faults_seen_by_a_standby_are_acted_on_when_it_takes_over() {
    let mut b = Bed::new(None);
    b.feed(vec![Input::Leader(false, 1)]);
    let i = b.pod_index("j1");
    b.m.fail_pod(i);
    b.m.node_fault("n2", "79");
    b.pump();
    assert_eq!(b.restarts() + b.cordons(), 0, "a standby acts on nothing");
    b.feed(vec![Input::Leader(true, 1)]);
    b.pump();
    assert!(b.restarts() >= 1, "the pod's fault, on take-over");
    assert_eq!(b.cordons(), 1, "the node's fault, on take-over");
}

#[test]
fn the_breaker_window_and_sticky_cordons_live_in_the_cluster() {
    let mut b = Bed::new(None);
    b.m.node_fault("n0", "79");
    b.m.node_fault("n1", "79");
    b.pump();
    assert_eq!(b.cordons(), 2);
    // A new controller (the old one died): the two separations are still
    // in the window, so a third node's fault is held.
    b.core = model::core();
    let mut ins = b.m.startup();
    ins.push(Input::Leader(true, 1));
    b.feed(ins);
    b.m.node_fault("n2", "79");
    b.pump();
    assert_eq!(b.cordons(), 2, "the breaker's window survived the restart");
    // The window moves on: the held separation is made.
    b.pass(model::WINDOW + 10);
    assert_eq!(b.cordons(), 3);
    // A fault that cleared while no controller ran is uncordoned by the
    // next one.
    b.m.node_clear("n0");
    b.core = model::core();
    let mut ins = b.m.startup();
    ins.push(Input::Leader(true, 1));
    b.feed(ins);
    b.pump();
    assert_ne!(
        b.m.nodes["n0"]["spec"]["unschedulable"],
        json!(true),
        "uncordoned"
    );
    assert_eq!(
        b.m.nodes["n1"]["spec"]["unschedulable"],
        json!(true),
        "still faulty"
    );
}

#[test]
fn a_stale_restart_never_deletes_the_pods_of_a_job_recreated_under_the_same_name() {
    let mut b = Bed::new(None);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    let ins = b.m.deliver(Kind::Pods, 100);
    b.feed(ins);
    let pending = std::mem::take(&mut b.queue);
    assert!(
        pending
            .iter()
            .any(|e| matches!(e.kind, EffectKind::RestartJob { .. }))
    );
    // Before the restart lands, j0 is deleted and created again (a new
    // uid) and its new pods run.
    b.m.recreate_job("j0");
    b.m.operator();
    let fresh: Vec<String> = b.pods_of("j0").into_iter().map(|(_, u)| u).collect();
    for e in pending {
        let o = b.m.apply(&e);
        b.feed(vec![Input::Done(e.id, o)]);
    }
    b.pump();
    let now: Vec<String> = b.pods_of("j0").into_iter().map(|(_, u)| u).collect();
    assert_eq!(now, fresh, "the new incarnation's pods are untouched");
}

#[test]
fn pods_stuck_terminating_on_a_dead_node_are_force_deleted_after_the_bound() {
    let mut spec = model::default_policy_spec();
    spec["restart"] = json!({"forceDeleteAfter": "30s"});
    let mut b = Bed::new(Some(spec));
    // j0 has a pod on n3; n3's kubelet dies, then a pod of j0 fails.
    let (stuck, _) =
        b.m.pods
            .iter()
            .find(|(_, p)| p["spec"]["nodeName"] == "n3")
            .map(|(n, p)| (n.clone(), p.clone()))
            .unwrap_or_default();
    let job = b.m.pods[&stuck]["metadata"]["labels"][model::JOBSET_NAME]
        .as_str()
        .unwrap_or("")
        .to_string();
    b.m.kill_node("n3");
    b.pump();
    let i = b.pod_index(&job);
    b.m.fail_pod(i);
    b.pump();
    assert!(
        b.m.pods[&stuck]["metadata"]["deletionTimestamp"].is_string(),
        "deleted, but no kubelet confirms"
    );
    b.pass(10);
    assert!(
        b.m.pods.contains_key(&stuck),
        "within the bound: left alone"
    );
    b.pass(30);
    assert!(
        !b.m.pods.contains_key(&stuck),
        "force-deleted after the bound"
    );
    assert!(b.log.iter().any(|e| matches!(&e.kind,
        EffectKind::DeletePods { pods, .. } if pods.iter().any(|p| p.name == stuck && p.grace_seconds == Some(0)))));
}

/// Issue 32: a JobSet at its `maxRestarts` (and its child Jobs at their
/// `backoffLimit`) is recreated through its child Jobs, which JobSet makes
/// anew: nothing of either limit is spent, so the restart is made.
#[test]
fn a_jobset_at_its_limits_is_recreated_through_its_child_jobs() {
    let mut b = Bed::new(None);
    if let Some(j) = b.m.jobs.get_mut("j0") {
        j["spec"]["failurePolicy"]["maxRestarts"] = json!(0);
        j["metadata"]["resourceVersion"] = json!("9999");
        let j = j.clone();
        b.feed(vec![Input::Job(
            crate::api::WorkloadKind::JobSet,
            Change::Apply(serde_json::from_value(j).expect("jobset")),
        )]);
    }
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1);
    let how: Vec<&DeleteAll> = b
        .log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::RestartJob { how, job, .. } if job.name == "j0" => Some(how),
            _ => None,
        })
        .collect();
    assert!(
        matches!(how.as_slice(), [DeleteAll::ChildJobs { jobs, selector }]
            if jobs.len() == 1 && jobs[0].name == "j0-w-0" && selector.contains("jobset-name=j0")),
        "{how:?}"
    );
}

/// A pod-first restart deletes one pod of a child Job that allows no
/// failure: the child fails and JobSet restarts, which a JobSet at its
/// `maxRestarts` cannot take. The policy decides.
#[test]
fn a_restart_that_would_exhaust_the_jobs_own_retry_limit_follows_the_policy() {
    for (action, deletes) in [("Skip", 0), ("Proceed", 1)] {
        let mut spec = model::default_policy_spec();
        spec["restart"] = json!({"onRetryLimit": action});
        spec["action"] = json!("RestartPod");
        let mut b = Bed::new(Some(spec));
        // j0 allows no more JobSet restarts: maxRestarts 0.
        if let Some(j) = b.m.jobs.get_mut("j0") {
            j["spec"]["failurePolicy"]["maxRestarts"] = json!(0);
            j["metadata"]["resourceVersion"] = json!("9999");
            let j = j.clone();
            let ins = vec![Input::Job(
                crate::api::WorkloadKind::JobSet,
                Change::Apply(serde_json::from_value(j).expect("jobset")),
            )];
            b.feed(ins);
        }
        let i = b.pod_index("j0");
        b.m.fail_pod(i);
        b.pump();
        let pod_deletes = b.count(|k| matches!(k, EffectKind::DeletePods { .. }));
        assert_eq!(pod_deletes, deletes, "onRetryLimit: {action}");
        if action == "Skip" {
            assert!(b.log.iter().any(|e| matches!(&e.kind,
                EffectKind::Event { notice, .. } if notice.note.contains("RetryLimit"))));
        }
    }
}

#[test]
fn a_duration_that_would_overflow_the_calendar_is_refused_when_compiled() {
    let mut spec = model::default_policy_spec();
    spec["restartBudget"] = json!({"maxRestarts": 3, "window": "300000y"});
    let p = model::policy(&spec);
    let err = crate::policy::CompiledPolicy::compile(&p).expect_err("refused");
    assert_eq!(err.field, "spec.restartBudget.window");
    // The core keeps running with the policy out of use.
    let mut b = Bed::new(Some(spec));
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 0, "an invalid policy is not used");
}

/// Issue 22 item 1: a tenant's Event with `count: 2147483647` cloned one
/// occurrence per count (the controller allocated until it was killed).
/// Now the line stands for its newest `MATERIALIZED` counts, it restarts at
/// most the tenant's own job once, and touches no node.
#[test]
fn a_tenant_event_with_a_huge_count_costs_a_bounded_window_and_no_node() {
    let mut b = Bed::new(None);
    let (pod, _) = b.pods_of("j0").remove(0);
    let node = b.m.pods[&pod]["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let at = b.m.wall().to_rfc3339();
    let ev: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "flood", "namespace": model::NS, "uid": "ev-flood",
            "annotations": {"kcover.io/need-recovery": "true"}},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": model::NS},
        "reason": "NeedRecovery", "count": i32::MAX,
        "firstTimestamp": at, "lastTimestamp": at,
        "source": {"host": node},
    }))
    .expect("event");
    b.feed(vec![Input::Event(Change::Apply(Box::new(ev.clone())))]);
    b.pump();
    let bound = super::super::occurrence::MATERIALIZED as usize;
    assert!(b.core.current.len() <= bound, "{}", b.core.current.len());
    assert!(b.core.ledger().len() <= bound, "{}", b.core.ledger().len());
    assert!(b.restarts() <= 1, "{}", b.restarts());
    assert_eq!(b.cordons(), 0, "a tenant's Event touches no node");
    // The same Event replayed (a relist) names the same occurrences.
    b.feed(vec![Input::Event(Change::Apply(Box::new(ev)))]);
    b.pump();
    assert!(b.core.current.len() <= bound);
    assert!(b.restarts() <= 1);
}

#[test]
fn logs_are_read_after_the_restart_was_answered_never_beside_it() {
    let mut spec = model::default_policy_spec();
    spec["preserveLogs"] = json!({"tailLines": 100});
    let mut b = Bed::new(Some(spec));
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    // Deliver the fault, but do not carry anything out yet.
    for k in KINDS {
        let ins = b.m.deliver(k, 10_000);
        b.feed(ins);
    }
    let restart: Vec<Effect> = b
        .queue
        .iter()
        .filter(|e| matches!(e.kind, EffectKind::RestartJob { .. }))
        .cloned()
        .collect();
    assert_eq!(restart.len(), 1, "{:?}", b.queue);
    assert_eq!(
        b.count(|k| matches!(k, EffectKind::SaveLogs { .. })),
        0,
        "no log read goes out beside the restart"
    );
    // A failed answer: still no logs; the retry's answer brings them, once.
    b.queue.retain(|e| e.id != restart[0].id);
    b.feed(vec![Input::Done(
        restart[0].id,
        Outcome::Failed("timeout".into()),
    )]);
    assert_eq!(b.count(|k| matches!(k, EffectKind::SaveLogs { .. })), 0);
    b.pass(5);
    assert_eq!(b.restarts(), 2, "retried");
    assert_eq!(
        b.count(|k| matches!(k, EffectKind::SaveLogs { .. })),
        1,
        "logs read once the restart was answered"
    );
    b.pass(30);
    assert_eq!(b.count(|k| matches!(k, EffectKind::SaveLogs { .. })), 1);
}

/// The version a restart's `deletecollection` may list from: the last pod
/// event the core applied, the failed pod's own for a pod exit, and a newer
/// one for the next restart (the first restart's deletions were seen).
#[test]
fn a_restart_lists_its_pods_no_older_than_the_last_pod_event_seen() {
    let mut spec = model::default_policy_spec();
    spec["cooldown"] = json!("0s");
    let mut b = Bed::new(Some(spec));
    let versions = |b: &Bed| -> Vec<Option<String>> {
        b.log
            .iter()
            .filter_map(|e| match &e.kind {
                EffectKind::RestartJob { pods_rv, .. } => {
                    Some(pods_rv.as_deref().map(str::to_string))
                }
                _ => None,
            })
            .collect()
    };
    let failed_rv = |b: &Bed| {
        b.m.pods
            .values()
            .find(|p| p["status"]["phase"] == "Failed")
            .and_then(|p| p["metadata"]["resourceVersion"].as_str())
            .map(str::to_string)
    };
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    let first = failed_rv(&b);
    assert!(first.is_some());
    b.pump();
    assert_eq!(
        versions(&b),
        vec![first.clone()],
        "one restart, at the failed pod's version"
    );
    b.pass(90);
    assert_eq!(failed_rv(&b), None, "the job was recreated");
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    let second = failed_rv(&b);
    b.pump();
    let v = versions(&b);
    assert_eq!(
        v,
        vec![first.clone(), second.clone()],
        "the second restart at the second failure's version"
    );
    assert_ne!(first, second);
}
