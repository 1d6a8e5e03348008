//! Pods and jobs shaped like the ones the real operators create.

use super::*;
use crate::api::policy::WorkloadKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

fn pod(v: serde_json::Value) -> ObjectMeta {
    serde_json::from_value(v).expect("valid ObjectMeta")
}

#[test]
fn pytorchjob_pod_from_its_controller_owner() {
    let meta = pod(json!({
        "name": "bert-worker-0", "namespace": "team-a", "uid": "p1",
        "labels": {
            "training.kubeflow.org/job-name": "bert",
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-index": "0",
            "training.kubeflow.org/replica-type": "worker"
        },
        "ownerReferences": [{
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert",
            "uid": "u-bert", "controller": true, "blockOwnerDeletion": true
        }]
    }));
    let job = job_of_pod(&meta);
    assert_eq!(
        job,
        JobRef {
            kind: WorkloadKind::PyTorchJob,
            api_version: "kubeflow.org/v1".into(),
            plural: "pytorchjobs".into(),
            namespace: "team-a".into(),
            name: "bert".into(),
            uid: Some("u-bert".into()),
        }
    );
    assert_eq!(job.id(), "PyTorchJob/team-a/bert");
    assert_eq!(
        pod_selector(&job).as_deref(),
        Some(
            "training.kubeflow.org/job-name=bert,training.kubeflow.org/operator-name=pytorchjob-controller"
        )
    );
}

#[test]
fn every_kubeflow_kind_from_the_owner_and_from_the_operator_label() {
    for (kind, plural) in [
        ("PyTorchJob", "pytorchjobs"),
        ("TFJob", "tfjobs"),
        ("MPIJob", "mpijobs"),
        ("XGBoostJob", "xgboostjobs"),
        ("PaddleJob", "paddlejobs"),
        ("JAXJob", "jaxjobs"),
    ] {
        let operator = format!("{}-controller", kind.to_lowercase());
        let labels = json!({
            "training.kubeflow.org/job-name": "j",
            "training.kubeflow.org/operator-name": operator,
            "training.kubeflow.org/replica-type": "worker"
        });
        let owned = job_of_pod(&pod(json!({
            "name": "j-worker-0", "namespace": "ns", "labels": labels,
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": kind, "name": "j", "uid": "u", "controller": true}]
        })));
        assert_eq!(owned.kind.as_str(), kind);
        assert_eq!(owned.plural, plural);
        assert_eq!(owned.uid.as_deref(), Some("u"));
        // No owner (a trimmed view): the operator-name label names the kind.
        let labelled = job_of_pod(&pod(
            json!({"name": "j-worker-0", "namespace": "ns", "labels": labels}),
        ));
        assert_eq!(labelled.kind.as_str(), kind);
        assert_eq!(
            (labelled.plural.as_str(), labelled.name.as_str()),
            (plural, "j")
        );
        assert_eq!(labelled.uid, None);
        assert_eq!(
            pod_selector(&labelled),
            Some(format!(
                "training.kubeflow.org/job-name=j,training.kubeflow.org/operator-name={operator}"
            ))
        );
    }
}

#[test]
fn mpi_operator_v2_keeps_its_version_and_selects_by_job_name_and_operator() {
    let job = job_of_pod(&pod(json!({
        "name": "pi-launcher", "namespace": "ns",
        "labels": {"training.kubeflow.org/job-name": "pi", "training.kubeflow.org/job-role": "launcher",
                   "training.kubeflow.org/operator-name": "mpi-operator"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "uid": "u", "controller": true}]
    })));
    assert_eq!(job.kind, WorkloadKind::MPIJob);
    assert_eq!(job.api_version, "kubeflow.org/v2beta1");
    assert_eq!(
        pod_selector(&job).as_deref(),
        Some("training.kubeflow.org/job-name=pi,training.kubeflow.org/operator-name=mpi-operator")
    );
    // A PyTorchJob named alike in the namespace is not selected.
    let pt = JobRef::new(WorkloadKind::PyTorchJob, "ns", "pi", None);
    assert_ne!(pod_selector(&pt), pod_selector(&job));
}

#[test]
fn volcano_job_pod() {
    let meta = pod(json!({
        "name": "tensorflow-dist-mnist-ps-0", "namespace": "default",
        "labels": {
            "volcano.sh/job-name": "tensorflow-dist-mnist",
            "volcano.sh/job-namespace": "default",
            "volcano.sh/queue-name": "default",
            "volcano.sh/task-spec": "ps"
        },
        "ownerReferences": [{
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "name": "tensorflow-dist-mnist", "uid": "u-v", "controller": true, "blockOwnerDeletion": true
        }]
    }));
    let job = job_of_pod(&meta);
    assert_eq!(job.kind, WorkloadKind::VolcanoJob);
    assert_eq!(job.api_version, "batch.volcano.sh/v1alpha1");
    assert_eq!(job.plural, "jobs");
    assert_eq!(job.k8s_kind(), "Job");
    assert_eq!(job.uid.as_deref(), Some("u-v"));
    assert_eq!(
        pod_selector(&job).as_deref(),
        Some("volcano.sh/job-name=tensorflow-dist-mnist,volcano.sh/job-namespace=default")
    );
}

#[test]
fn jobset_pod_is_owned_by_a_batch_job_but_belongs_to_the_jobset() {
    let meta = pod(json!({
        "name": "llm-workers-0-0-abcde", "namespace": "ml",
        "labels": {
            "batch.kubernetes.io/job-name": "llm-workers-0",
            "batch.kubernetes.io/controller-uid": "u-child",
            "controller-uid": "u-child",
            "job-name": "llm-workers-0",
            "jobset.sigs.k8s.io/jobset-name": "llm",
            "jobset.sigs.k8s.io/jobset-uid": "u-js",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": "0"
        },
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llm-workers-0", "uid": "u-child", "controller": true}]
    }));
    let job = job_of_pod(&meta);
    assert_eq!(job.kind, WorkloadKind::JobSet);
    assert_eq!(job.api_version, "jobset.x-k8s.io/v1alpha2");
    assert_eq!(job.plural, "jobsets");
    assert_eq!(job.name, "llm");
    assert_eq!(job.uid.as_deref(), Some("u-js"));
    assert_eq!(
        pod_selector(&job).as_deref(),
        Some("jobset.sigs.k8s.io/jobset-name=llm,jobset.sigs.k8s.io/jobset-uid=u-js")
    );
}

#[test]
fn batch_job_pod_even_with_a_volcano_gang_label() {
    let meta = pod(json!({
        "name": "gang-job-x1", "namespace": "default",
        "labels": {
            "batch.kubernetes.io/job-name": "gang-job",
            "batch.kubernetes.io/controller-uid": "u-job",
            "job-name": "gang-job", "controller-uid": "u-job",
            "volcano.sh/job-name": "gang-job"
        },
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "gang-job", "uid": "u-job", "controller": true}]
    }));
    let job = job_of_pod(&meta);
    assert_eq!(job.kind, WorkloadKind::Job);
    assert_eq!(
        (job.api_version.as_str(), job.plural.as_str()),
        ("batch/v1", "jobs")
    );
    assert_eq!(job.uid.as_deref(), Some("u-job"));
    assert_eq!(
        pod_selector(&job).as_deref(),
        Some("batch.kubernetes.io/controller-uid=u-job")
    );
    // Legacy labels only, no owner: still the Job, by name.
    let legacy = job_of_pod(&pod(json!({
        "name": "old-x", "namespace": "default", "labels": {"job-name": "old"}
    })));
    assert_eq!(
        (legacy.kind, legacy.name.as_str()),
        (WorkloadKind::Job, "old")
    );
    assert_eq!(
        pod_selector(&legacy).as_deref(),
        Some("batch.kubernetes.io/job-name=old")
    );
}

#[test]
fn bare_and_foreign_controlled_pods_are_their_own_job() {
    let bare = job_of_pod(&pod(json!({"name": "p", "namespace": "ns", "uid": "u-p"})));
    assert_eq!(
        bare,
        JobRef::new(WorkloadKind::Pod, "ns", "p", Some("u-p".into()))
    );
    assert_eq!(pod_selector(&bare), None);
    let rs = job_of_pod(&pod(json!({
        "name": "web-7d9f-abc", "namespace": "ns", "uid": "u-w",
        "labels": {"app": "web"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "u-rs", "controller": true}]
    })));
    assert_eq!(
        (rs.kind, rs.name.as_str()),
        (WorkloadKind::Pod, "web-7d9f-abc")
    );
    // A kind named like a Kubeflow one in another group is not Kubeflow.
    let other = job_of_pod(&pod(json!({
        "name": "x-0", "namespace": "ns",
        "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "PyTorchJob", "name": "x", "uid": "u", "controller": true}]
    })));
    assert_eq!(other.kind, WorkloadKind::Pod);
}

#[test]
fn kubeflow_restart_policy_per_replica_and_for_the_job() {
    let job = json!({"spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "restartPolicy": "OnFailure"},
        "Worker": {"replicas": 4, "restartPolicy": "Never"}
    }}});
    let k = WorkloadKind::PyTorchJob;
    assert!(restart_policy_never(k, &job, Some("worker")));
    assert!(!restart_policy_never(k, &job, Some("master")));
    assert!(restart_policy_never(k, &job, None));
    // Absent: the operator's in-memory default is not the user's refusal.
    let silent = json!({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2}}}});
    assert!(!restart_policy_never(WorkloadKind::TFJob, &silent, None));
    let xgb = json!({"spec": {"xgbReplicaSpecs": {"Master": {"restartPolicy": "Never"}}}});
    assert!(restart_policy_never(
        WorkloadKind::XGBoostJob,
        &xgb,
        Some("master")
    ));
    assert!(!restart_policy_never(
        WorkloadKind::XGBoostJob,
        &xgb,
        Some("worker")
    ));
    assert!(!restart_policy_never(k, &json!("garbage"), None));
}

#[test]
fn volcano_batch_jobset_and_pod_restart_policies() {
    use WorkloadKind::*;
    assert!(restart_policy_never(
        VolcanoJob,
        &json!({"spec": {"maxRetry": 0}}),
        None
    ));
    assert!(!restart_policy_never(
        VolcanoJob,
        &json!({"spec": {"maxRetry": 3}}),
        None
    ));
    assert!(!restart_policy_never(
        VolcanoJob,
        &json!({"spec": {}}),
        None
    ));

    assert!(restart_policy_never(
        Job,
        &json!({"spec": {"backoffLimit": 0}}),
        None
    ));
    assert!(restart_policy_never(
        Job,
        &json!({"spec": {"backoffLimitPerIndex": 0, "completionMode": "Indexed"}}),
        None
    ));
    let pod_never = json!({"spec": {"template": {"spec": {"restartPolicy": "Never"}}}});
    assert!(!restart_policy_never(Job, &pod_never, None));

    let js = |max_restarts: Option<i64>| {
        json!({"spec": {
            "failurePolicy": max_restarts.map(|m| json!({"maxRestarts": m})),
            "replicatedJobs": [
                {"name": "driver", "template": {"spec": {"backoffLimit": 2}}},
                {"name": "workers", "template": {"spec": {"backoffLimit": 0}}}
            ]
        }})
    };
    assert!(restart_policy_never(JobSet, &js(None), None));
    assert!(restart_policy_never(JobSet, &js(Some(0)), Some("workers")));
    assert!(!restart_policy_never(JobSet, &js(None), Some("driver")));
    assert!(!restart_policy_never(JobSet, &js(Some(3)), None));

    let bare = json!({"metadata": {"name": "p"}});
    assert!(restart_policy_never(Pod, &bare, None));
    let owned = json!({"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}
    ]}});
    assert!(!restart_policy_never(Pod, &owned, None));
}
