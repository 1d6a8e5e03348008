//! Every recovery whose restart was made is followed to its end (issue 32
//! item 2): `JobResumed` when every pod of the new generation runs and is
//! Ready, `JobNotResumed` with why when its operator gives up or its pods
//! are not back within the bound; the histogram by kind and tier, the
//! counter, the policy's status. A restart never made ends in neither.

use super::super::effect::EffectKind;
use super::super::input::{Change, Input};
use super::bed::Bed;
use crate::api::WorkloadKind;
use crate::recover::reasons;
use serde_json::json;

fn notes(b: &Bed, reason: &str) -> Vec<String> {
    b.job_notes("j0", reason)
}

/// The metrics as Prometheus text.
fn exposition(b: &Bed) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &b.core.metrics.registry).expect("encode");
    out
}

/// The last status body written for the root policy.
fn last_status(b: &Bed) -> serde_json::Value {
    b.log
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EffectKind::Status { body, .. } => Some(body["status"].clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// j0's pod fails; the default policy recreates j0.
fn restart_j0(b: &mut Bed) {
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1, "j0 recreated");
}

/// Rewrite j0 with `f` applied, as its operator would.
fn rewrite_j0(b: &mut Bed, f: impl FnOnce(&mut serde_json::Value)) {
    let rv = b.m.bump_rv();
    let Some(j) = b.m.jobs.get_mut("j0") else {
        panic!("no j0")
    };
    f(j);
    j["metadata"]["resourceVersion"] = json!(rv);
    let j = j.clone();
    b.feed(vec![Input::Job(
        WorkloadKind::JobSet,
        Change::Apply(serde_json::from_value(j).expect("jobset")),
    )]);
}

#[test]
fn a_recreated_job_whose_pods_run_again_is_reported_resumed_once() {
    let mut b = Bed::new(None);
    restart_j0(&mut b);
    b.pass(3);
    assert!(
        notes(&b, reasons::JOB_RESUMED).is_empty(),
        "not resumed while its pods are gone"
    );
    b.m.operator();
    b.pump();
    b.pass(2);
    let resumed = notes(&b, reasons::JOB_RESUMED);
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(resumed[0].contains("Recreate restart"), "{}", resumed[0]);
    assert!(notes(&b, reasons::JOB_NOT_RESUMED).is_empty());
    let text = exposition(&b);
    assert!(
        text.contains(r#"rebound_time_to_resume_seconds_count{kind="JobSet",tier="Recreate"} 1"#),
        "{text}"
    );
    b.pass(2);
    let status = last_status(&b);
    assert_eq!(status["resumed"], json!(1), "{status}");
    assert_eq!(status["notResumed"], json!(0), "{status}");
    assert!(status["lastTimeToResume"].is_string(), "{status}");
    // Nothing more is said of that recovery.
    b.pass(30);
    assert_eq!(notes(&b, reasons::JOB_RESUMED).len(), 1);
}

#[test]
fn a_job_its_operator_fails_after_the_restart_is_reported_not_resumed_with_why() {
    let mut b = Bed::new(None);
    restart_j0(&mut b);
    // The positive control first: still followed, nothing said yet.
    b.pass(1);
    assert!(notes(&b, reasons::JOB_NOT_RESUMED).is_empty());
    rewrite_j0(&mut b, |j| {
        j["status"]["conditions"] = json!([{"type": "Failed", "status": "True",
            "reason": "FailedJobs", "message": "jobset failed: w-0 BackoffLimitExceeded"}]);
    });
    b.pump();
    b.pass(1);
    let not = notes(&b, reasons::JOB_NOT_RESUMED);
    assert_eq!(not.len(), 1, "{not:?}");
    assert!(
        not[0].contains("its operator gave up on it: FailedJobs: jobset failed"),
        "{}",
        not[0]
    );
    assert_eq!(b.core.recoveries(), 0, "the recovery ended");
    // Pods made later (the operator of another world) do not turn it
    // into a resume.
    b.m.operator();
    b.pump();
    b.pass(3);
    assert!(notes(&b, reasons::JOB_RESUMED).is_empty());
    let text = exposition(&b);
    assert!(
        text.contains(r#"rebound_jobs_not_resumed_total{kind="JobSet"} 1"#),
        "{text}"
    );
    b.pass(10);
    assert_eq!(last_status(&b)["notResumed"], json!(1));
}

#[test]
fn pods_that_never_come_back_end_in_job_not_resumed_at_the_bound() {
    let mut b = Bed::new(None);
    restart_j0(&mut b);
    b.pass(60);
    assert!(
        notes(&b, reasons::JOB_NOT_RESUMED).is_empty(),
        "followed while within the bound"
    );
    b.pass(15 * 60);
    let not = notes(&b, reasons::JOB_NOT_RESUMED);
    assert_eq!(not.len(), 1, "{not:?}");
    assert!(not[0].contains("not running and Ready again"), "{}", not[0]);
    assert!(
        notes(&b, reasons::RESTART_SKIPPED).is_empty(),
        "a restart that was made is not called skipped"
    );
}

#[test]
fn a_restart_never_made_ends_in_neither() {
    let mut b = Bed::new(None);
    b.refuse = |k| matches!(k, EffectKind::RestartJob { .. });
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    b.pass(600);
    assert!(
        b.count(|k| matches!(k, EffectKind::RestartJob { .. })) >= 1,
        "the restart was tried"
    );
    assert!(
        !notes(&b, reasons::RESTART_SKIPPED).is_empty(),
        "its failure is said"
    );
    assert!(notes(&b, reasons::JOB_RESUMED).is_empty());
    assert!(notes(&b, reasons::JOB_NOT_RESUMED).is_empty());
}
