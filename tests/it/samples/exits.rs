//! Container exits in the samples: OOM and exit codes restart the job, a
//! SIGTERM is a deliberate stop, and pod exits never touch nodes.

use super::*;

// --- container exits -----------------------------------------------------------------------

#[test]
fn samples_oom_killed_restarts_the_job() {
    // An opted-in job in a namespace without its own policy: the cluster default.
    let job = "kind=PyTorchJob,name=llm,namespace=team-c,labels.kcover.io/cascading-recovery=true";
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=137,reason=OOMKilled,node=gpu-3,pod=llm-worker-1,namespace=team-c",
        Some(job),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::RestartJob);
    assert_eq!(
        d.rule, "pod-exit/oom-killed",
        "the reason wins over exit 137"
    );
    assert!(
        d.node.as_ref().is_some_and(|n| n.actions.is_empty()),
        "an OOM never touches the node"
    );
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    assert_eq!(
        d.jobs[0].policy.as_deref(),
        Some("rebound-system/cluster-default")
    );
    // In team-a the team policy restarts the failed pod first.
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=137,reason=OOMKilled,node=gpu-3,pod=llm-worker-1,namespace=team-a",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert!(d.jobs[0].acts());
    assert!(
        matches!(&d.jobs[0].action, Some(JobAction::RestartPod { pod, .. }) if pod == "llm-worker-1")
    );
}

#[test]
fn samples_exit_code_1_restarts_the_job() {
    let job = "kind=MPIJob,name=bert,namespace=team-c,labels.kcover.io/cascading-recovery=true";
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=1,reason=Error,node=gpu-9,pod=bert-worker-0,namespace=team-c",
        Some(job),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::RestartJob, "rule {}", d.rule);
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
}

#[test]
fn samples_sigterm_is_a_deliberate_stop() {
    let job = "kind=PyTorchJob,name=llm,namespace=team-c,labels.kcover.io/cascading-recovery=true";
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=143,reason=Error,node=gpu-9,pod=llm-worker-0,namespace=team-c",
        Some(job),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::Ignore);
    assert!(!d.jobs[0].acts());
}

#[test]
fn samples_pod_exits_never_touch_nodes() {
    // A tenant writes its own exit codes and messages: no PodExit rule may cordon.
    let loaded = load_paths(&[samples_dir()]).unwrap();
    for (_, c) in &loaded.classifications {
        if c.spec.source == FaultSource::PodExit || c.spec.source == FaultSource::KubeEvent {
            for r in &c.spec.rules {
                assert!(
                    r.level <= Level::RestartJob,
                    "{} rule {} is {}",
                    c.spec.source,
                    r.name,
                    r.level
                );
            }
            assert!(
                c.spec
                    .escalations
                    .iter()
                    .all(|e| e.level <= Level::RestartJob)
            );
            assert!(c.spec.default_level.is_none_or(|l| l <= Level::RestartJob));
        }
    }
}
