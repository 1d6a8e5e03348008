//! Tests of the Kubeflow operator's planning: pod names and labels,
//! restart policies, finished jobs.

use super::plan::is_finished;
use super::*;
use crate::actors::util::str_at;
use std::collections::BTreeMap;

fn job(policy: &str, workers: u64) -> DynamicObject {
    let mut o = DynamicObject::new("train", &KubeflowKind::PyTorchJob.api_resource()).within("ns");
    o.metadata.uid = Some("u1".into());
    o.data = json!({"spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "restartPolicy": policy, "template": {
            "metadata": {"labels": {"kcover.io/cascading-recovery": "true"}},
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}},
        "Worker": {"replicas": workers, "restartPolicy": policy, "template": {
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}},
    }}});
    o
}

fn pod(name: &str, rt: &str, idx: usize, phase: &str, exit: Option<i32>) -> ChildPod {
    ChildPod {
        name: name.into(),
        labels: BTreeMap::from([
            (REPLICA_TYPE_LABEL.to_owned(), rt.to_owned()),
            (REPLICA_INDEX_LABEL.to_owned(), idx.to_string()),
        ]),
        phase: Some(phase.into()),
        exit_codes: exit
            .map(|c| vec![("pytorch".to_owned(), c)])
            .unwrap_or_default(),
        ..Default::default()
    }
}

#[test]
fn creates_named_labelled_pods_with_the_replica_policy() {
    let j = job("ExitCode", 2);
    let p = plan(KubeflowKind::PyTorchJob, &j, &[], &InFlight::default());
    let names: Vec<&str> = p
        .creates
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["train-master-0", "train-worker-0", "train-worker-1"]
    );
    let master = &p.creates[0];
    assert_eq!(master["metadata"]["labels"][JOB_ROLE_LABEL], "master");
    assert_eq!(
        master["metadata"]["labels"]["kcover.io/cascading-recovery"],
        "true"
    );
    assert_eq!(master["metadata"]["labels"][REPLICA_TYPE_LABEL], "master");
    assert_eq!(master["spec"]["restartPolicy"], "Never");
    assert_eq!(master["metadata"]["ownerReferences"][0]["controller"], true);
    assert!(
        p.creates[1]["metadata"]["labels"]
            .get(JOB_ROLE_LABEL)
            .is_none()
    );
    let conds = p
        .status
        .as_ref()
        .and_then(|s| s["conditions"].as_array().cloned())
        .unwrap_or_default();
    assert_eq!(str_at(&conds[0], &["type"]), Some("Created"));
}

#[test]
fn exit_code_policy_retries_only_signals() {
    let j = job("ExitCode", 1);
    let a = pod("train-master-0", "master", 0, "Running", None);
    let b = pod("train-worker-0", "worker", 0, "Failed", Some(137));
    let p = plan(
        KubeflowKind::PyTorchJob,
        &j,
        &[&a, &b],
        &InFlight::default(),
    );
    assert_eq!(p.deletes, ["train-worker-0"]);
    let s = p.status.expect("status");
    assert!(
        s["conditions"]
            .as_array()
            .expect("conds")
            .iter()
            .any(|c| c["type"] == "Restarting")
    );
    let b = pod("train-worker-0", "worker", 0, "Failed", Some(1));
    let p = plan(
        KubeflowKind::PyTorchJob,
        &j,
        &[&a, &b],
        &InFlight::default(),
    );
    assert!(p.deletes.is_empty());
    assert!(is_finished(&p.status.expect("status")));
}

#[test]
fn never_policy_fails_the_job_and_a_finished_job_is_left_alone() {
    let mut j = job("Never", 1);
    let a = pod("train-master-0", "master", 0, "Running", None);
    let b = pod("train-worker-0", "worker", 0, "Failed", Some(1));
    let p = plan(
        KubeflowKind::PyTorchJob,
        &j,
        &[&a, &b],
        &InFlight::default(),
    );
    assert!(p.deletes.is_empty() && p.creates.is_empty());
    let status = p.status.expect("status");
    assert!(is_finished(&status));
    j.data["status"] = status;
    let p = plan(KubeflowKind::PyTorchJob, &j, &[&a], &InFlight::default());
    assert!(p.creates.is_empty(), "no pod recreated for a failed job");
}
