//! Tests of the Job controller's planning: indexed pods, backoff limit.

use super::plan::condition_true;
use super::*;
use std::collections::BTreeMap;

fn job(indexed: bool, n: i32) -> Job {
    let mut j: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {"parallelism": n, "completions": n, "backoffLimit": 1,
            "template": {"metadata": {"labels": {"app": "x"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}},
    }))
    .expect("job");
    if indexed && let Some(s) = j.spec.as_mut() {
        s.completion_mode = Some("Indexed".into());
    }
    j
}

fn pod(name: &str, idx: Option<i32>, phase: &str) -> ChildPod {
    let mut labels = BTreeMap::new();
    if let Some(i) = idx {
        labels.insert(COMPLETION_INDEX.to_owned(), i.to_string());
    }
    ChildPod {
        name: name.into(),
        labels,
        phase: Some(phase.into()),
        ..Default::default()
    }
}

#[test]
fn indexed_job_creates_one_pod_per_missing_index() {
    let j = job(true, 3);
    let a = pod("j-0-abcde", Some(0), "Running");
    let p = plan(
        &j,
        &[&a],
        &[Some(2)],
        &mut HashSet::new(),
        &InFlight::default(),
    );
    assert_eq!(p.creates.len(), 1);
    let (pod, idx) = &p.creates[0];
    assert_eq!(*idx, Some(1));
    assert_eq!(pod["metadata"]["labels"][COMPLETION_INDEX], "1");
    assert_eq!(pod["metadata"]["labels"]["controller-uid"], "u");
    assert_eq!(pod["metadata"]["labels"]["app"], "x");
    assert!(
        pod["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("j-1-"))
    );
}

#[test]
fn failures_past_the_backoff_limit_fail_the_job() {
    let j = job(false, 1);
    let mut seen = HashSet::new();
    let a = pod("j-aaaaa", None, "Failed");
    let p = plan(&j, &[&a], &[], &mut seen, &InFlight::default());
    assert_eq!(p.creates.len(), 1, "replacement pod");
    let b = pod("j-bbbbb", None, "Failed");
    let p = plan(&j, &[&a, &b], &[], &mut seen, &InFlight::default());
    assert!(p.creates.is_empty());
    assert!(condition_true(&p.status.expect("status"), "Failed"));
}
