//! Tests of the Volcano job controller's planning.

use super::*;
use std::collections::BTreeMap;

fn job(policies: Value) -> DynamicObject {
    let mut o = DynamicObject::new("vj", &job_resource()).within("ns");
    o.metadata.uid = Some("u".into());
    o.data = json!({"spec": {"minAvailable": 2, "queue": "q", "maxRetry": 2, "policies": policies,
        "tasks": [{"name": "worker", "replicas": 2, "template": {
            "metadata": {"labels": {"kcover.io/cascading-recovery": "true"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}]}});
    o
}

fn pod(i: usize, phase: &str, version: i64) -> ChildPod {
    ChildPod {
        name: format!("vj-worker-{i}"),
        labels: BTreeMap::from([(TASK_SPEC.to_owned(), "worker".to_owned())]),
        annotations: BTreeMap::from([(JOB_VERSION.to_owned(), version.to_string())]),
        phase: Some(phase.into()),
        ..Default::default()
    }
}

#[test]
fn pods_carry_volcano_labels_and_annotations() {
    let j = job(json!([]));
    let p = plan(&j, &json!({}), &[], &[], &InFlight::default());
    assert_eq!(p.creates.len(), 2);
    let m = &p.creates[1]["metadata"];
    assert_eq!(m["name"], "vj-worker-1");
    assert_eq!(m["labels"][JOB_NAME], "vj");
    assert_eq!(m["labels"][QUEUE_NAME], "q");
    assert_eq!(m["labels"]["kcover.io/cascading-recovery"], "true");
    assert_eq!(m["annotations"][TASK_INDEX], "1");
    assert_eq!(m["annotations"][JOB_VERSION], "0");
}

#[test]
fn restart_job_kills_bumps_and_recreates_until_max_retry() {
    let j = job(json!([]));
    let (a, b) = (pod(0, "Running", 0), pod(1, "Running", 0));
    let st = json!({"state": {"phase": "Running"}, "version": 0, "retryCount": 0});
    let req = [Request {
        action: "RestartJob".into(),
        pod: None,
    }];
    let p = plan(&j, &st, &[&a, &b], &req, &InFlight::default());
    assert_eq!(p.deletes.len(), 2);
    let st = p.status.expect("status");
    assert_eq!(st["version"], 1);
    assert_eq!(st["retryCount"], 1);
    assert_eq!(str_at(&st, &["state", "phase"]), Some("Restarting"));
    // Pods gone: back to Pending and recreated with the new version.
    let p = plan(&j, &st, &[], &[], &InFlight::default());
    assert_eq!(p.creates.len(), 2);
    assert_eq!(p.creates[0]["metadata"]["annotations"][JOB_VERSION], "1");
    let st = p.status.expect("status");
    assert_eq!(str_at(&st, &["state", "phase"]), Some("Pending"));
    // The second restart reaches maxRetry = 2: the job fails.
    let (a, b) = (pod(0, "Running", 1), pod(1, "Running", 1));
    let p = plan(&j, &st, &[&a, &b], &req, &InFlight::default());
    let st = p.status.expect("status");
    let p = plan(&j, &st, &[], &[], &InFlight::default());
    assert!(p.creates.is_empty());
    assert_eq!(
        p.status
            .and_then(|s| str_at(&s, &["state", "phase"]).map(str::to_owned))
            .as_deref(),
        Some("Failed")
    );
}

#[test]
fn policies_map_events_and_exit_codes() {
    let j = job(
        json!([{"event": "PodEvicted", "action": "RestartJob"}, {"exitCode": 3, "action": "AbortJob"}]),
    );
    assert_eq!(
        policy_action(&j.data, "worker", "PodEvicted", None).as_deref(),
        Some("RestartJob")
    );
    assert_eq!(
        policy_action(&j.data, "worker", "PodFailed", Some(3)).as_deref(),
        Some("AbortJob")
    );
    assert_eq!(policy_action(&j.data, "worker", "PodFailed", Some(1)), None);
}
