//! A fault that reaches the core before its job's object (the pods' and
//! the job's watches are separate streams) waits for the object instead of
//! being skipped for want of labels; a job that never comes is decided at
//! the end of the wait.

use super::bed::Bed;
use super::model::{Kind, Model};
use crate::controller::core::occurrence::Fate;
use crate::controller::core::unseen_jobs::UNSEEN_JOB_WAIT;

/// A bed with a third job created whose pods the core has seen but whose
/// object is still queued; the node of one of its pods.
fn job_behind_its_pods() -> (Bed, String) {
    let mut b = Bed::on(Model::new(2, 2, 2), None);
    b.m.create_job("late");
    b.m.operator();
    let ins = b.m.deliver(Kind::Pods, 100);
    assert!(!ins.is_empty(), "the late job's pods are delivered");
    b.feed(ins);
    let node =
        b.m.pods
            .values()
            .find(|p| p["metadata"]["labels"][super::model::JOBSET_NAME] == "late")
            .and_then(|p| p["spec"]["nodeName"].as_str())
            .map(str::to_string)
            .expect("a pod of the late job");
    (b, node)
}

/// Deliver and carry out everything but the job objects.
fn pump_without_jobs(b: &mut Bed) {
    for _ in 0..20 {
        for k in [Kind::Pods, Kind::Nodes] {
            let ins = b.m.deliver(k, 1000);
            b.feed(ins);
        }
        let effects = std::mem::take(&mut b.queue);
        for e in effects {
            let o = b.m.apply(&e);
            b.feed(vec![crate::controller::core::input::Input::Done(e.id, o)]);
        }
    }
}

fn late_restarts(b: &Bed) -> usize {
    b.count(|k| {
        matches!(k, crate::controller::core::effect::EffectKind::RestartJob { job, .. }
            if job.name == "late")
    })
}

#[test]
fn a_node_fault_before_its_jobs_object_restarts_the_job_when_the_object_arrives() {
    let (mut b, node) = job_behind_its_pods();
    b.m.node_fault(&node, "13");
    pump_without_jobs(&mut b);
    assert_eq!(late_restarts(&b), 0, "no labels yet: nothing decided");
    assert!(
        b.core
            .ledger
            .iter()
            .any(|(_, e)| matches!(e.fate, Fate::Pending { .. })),
        "the occurrence waits (it used to be skipped as NoPolicy, for good)"
    );
    assert_eq!(b.core.unseen.len(), 1, "waiting for one job");
    // The job's object arrives, no time passing: decided at once.
    let ins = b.m.deliver(Kind::Jobs, 10);
    b.feed(ins);
    assert_eq!(late_restarts(&b), 1, "restarted when its object arrived");
    assert_eq!(b.core.unseen.len(), 0, "nothing waits any more");
    // The way back: the restart completes and nothing restarts twice.
    b.pump();
    b.m.operator();
    b.pass(super::model::COOLDOWN + 5);
    assert_eq!(late_restarts(&b), 1, "one restart for one fault");
}

#[test]
fn a_pod_failure_before_its_jobs_object_restarts_the_job_when_the_object_arrives() {
    let (mut b, _) = job_behind_its_pods();
    let i = b.pod_index("late");
    b.m.fail_pod(i);
    pump_without_jobs(&mut b);
    assert_eq!(late_restarts(&b), 0);
    let ins = b.m.deliver(Kind::Jobs, 10);
    b.feed(ins);
    assert_eq!(late_restarts(&b), 1);
}

#[test]
fn a_job_that_never_comes_is_decided_when_the_wait_ends() {
    let (mut b, node) = job_behind_its_pods();
    // Its object is lost (deleted before the watch showed it).
    b.m.jobs.remove("late");
    b.m.queues.entry(Kind::Jobs).or_default().clear();
    b.m.node_fault(&node, "13");
    pump_without_jobs(&mut b);
    let wait = UNSEEN_JOB_WAIT.as_secs() as i64;
    for _ in 0..wait - 1 {
        b.m.t += 1;
        b.feed(vec![crate::controller::core::input::Input::Tick]);
        pump_without_jobs(&mut b);
    }
    assert!(
        b.core
            .ledger
            .iter()
            .any(|(_, e)| matches!(e.fate, Fate::Pending { .. })),
        "still waiting before the end"
    );
    b.pass(2);
    assert!(
        !b.core
            .ledger
            .iter()
            .any(|(_, e)| matches!(e.fate, Fate::Pending { .. })),
        "decided once the wait is over"
    );
    assert_eq!(late_restarts(&b), 0, "no job object, no policy: no restart");
    assert_eq!(b.core.unseen.len(), 0, "the wait is forgotten");
}
