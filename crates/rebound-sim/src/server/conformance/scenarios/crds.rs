//! CustomResourceDefinitions with the real Kubeflow, Volcano and JobSet
//! schemas (read from `../shared/data/crds`) and rebound's own: served
//! once Established; their objects' defaults, pruning, validation,
//! `/status`, `/scale`, printer columns and the patch types allowed.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::super::scenario::{Body, Keep, Scenario, Wait};
use super::{APPLY, MERGE, STRATEGIC};

fn yaml(text: &str) -> Option<Value> {
    serde_saphyr::from_str::<Value>(text).ok()
}

/// The CRD's create and the wait for it to be served.
pub(super) fn register(
    s: &mut Scenario,
    crd: Value,
    name: &'static str,
    step: &'static str,
    wait: &'static str,
) {
    s.post(
        step,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd,
    )
    .keep(Keep::Only(vec![
        "/body/metadata/name",
        "/body/metadata/generation",
        "/body/status/acceptedNames",
    ]));
    s.get(
        wait,
        &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"),
    )
    .wait(Wait::Field("/status/conditions/1/status", json!("True")))
    .keep(Keep::Only(vec!["/body/status"]));
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

fn pytorch(shared: &Path) -> Option<Scenario> {
    let crd = yaml(
        &std::fs::read_to_string(
            shared.join("data/crds/kubeflow-training-v1/kubeflow.org_pytorchjobs.yaml"),
        )
        .ok()?,
    )?;
    let mut s = Scenario::namespaced(
        "crd-pytorchjob",
        "the real PyTorchJob CRD: served once Established; defaults, pruning with a Warning, validation, /scale, /status, patch types",
    );
    register(
        &mut s,
        crd,
        "pytorchjobs.kubeflow.org",
        "register",
        "established",
    );
    s.get("discovery", "/apis/kubeflow.org/v1")
        .timeout(Duration::from_secs(30))
        .wait(Wait::Status(200));
    let jobs = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs";
    let worker = json!({"replicas": 2, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [{"name": "pytorch", "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727", "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]}]}}});
    s.post("create", jobs, json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "labels": {"kcover.io/cascading-recovery": "true"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": worker["template"].clone()}, "Worker": worker.clone()},
                 "unknownField": 1},
        "status": {"conditions": []}}))
        .compare_header("warning")
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.post("create-strict", &format!("{jobs}?fieldValidation=Strict"), json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "strict"}, "spec": {"pytorchReplicaSpecs": {"Worker": worker.clone()}, "unknownField": 1}}));
    s.post("create-invalid", jobs, json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "bad"}, "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "two", "template": {}}}, "runPolicy": {"backoffLimit": "x"}}}));
    s.get("get-scale", &format!("{jobs}/mnist/scale"));
    s.patch(
        "patch-scale",
        &format!("{jobs}/mnist/scale"),
        MERGE,
        Body::Json(json!({"spec": {"replicas": 4}})),
    );
    s.get("worker-replicas", &format!("{jobs}/mnist"))
        .keep(Keep::Only(vec![
            "/body/spec/pytorchReplicaSpecs/Worker/replicas",
            "/body/metadata/generation",
        ]));
    s.patch("status", &format!("{jobs}/mnist/status"), MERGE,
        Body::Json(json!({"status": {"conditions": [{"type": "Running", "status": "True", "reason": "Running", "message": "running", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, "spec": {"runPolicy": {"suspend": true}}})))
        .keep(Keep::Only(vec!["/body/status", "/body/spec/runPolicy", "/body/metadata/generation"]));
    s.patch(
        "annotate",
        &format!("{jobs}/mnist"),
        MERGE,
        Body::Json(json!({"metadata": {"annotations": {"rebound.dev/restart-generation": "1"}}})),
    )
    .keep(Keep::Only(vec![
        "/body/metadata/annotations",
        "/body/metadata/generation",
    ]));
    s.patch(
        "strategic-refused",
        &format!("{jobs}/mnist"),
        STRATEGIC,
        Body::Json(json!({"metadata": {"labels": {"a": "b"}}})),
    );
    s.patch("apply", &format!("{jobs}/mnist?fieldManager=rebound"), APPLY,
        Body::Json(json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mnist", "annotations": {"rebound.dev/restart-count": "1"}}})))
        .keep(Keep::Only(vec!["/body/metadata/annotations", "/body/metadata/managedFields"]));
    s.put(
        "put-without-rv",
        &format!("{jobs}/mnist"),
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "mnist"},
        "spec": {"pytorchReplicaSpecs": {"Worker": worker}}}),
    );
    s.get("table", jobs)
        .header("Accept", TABLE)
        .keep(Keep::Drop(vec!["/body/rows/*/object"]));
    s.get("list", jobs).keep(Keep::Only(vec![
        "/body/kind",
        "/body/apiVersion",
        "/body/items/*/kind",
        "/body/items/*/apiVersion",
        "/body/items/*/metadata/name",
    ]));
    s.delete("delete", &format!("{jobs}/mnist"), None);
    Some(s)
}

fn volcano(shared: &Path) -> Option<Scenario> {
    let jobs_crd = yaml(
        &std::fs::read_to_string(shared.join("data/crds/volcano/batch.volcano.sh_jobs.yaml"))
            .ok()?,
    )?;
    let cmd_crd = yaml(
        &std::fs::read_to_string(shared.join("data/crds/volcano/bus.volcano.sh_commands.yaml"))
            .ok()?,
    )?;
    let mut s = Scenario::namespaced(
        "crd-volcano",
        "the real Volcano Job and Command CRDs: schema defaults (maxRetry), a RestartJob Command",
    );
    register(
        &mut s,
        jobs_crd,
        "jobs.batch.volcano.sh",
        "register-jobs",
        "jobs-established",
    );
    register(
        &mut s,
        cmd_crd,
        "commands.bus.volcano.sh",
        "register-commands",
        "commands-established",
    );
    s.get("discovery", "/apis/batch.volcano.sh/v1alpha1")
        .wait(Wait::Status(200));
    s.get("discovery-bus", "/apis/bus.volcano.sh/v1alpha1")
        .wait(Wait::Status(200));
    let jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs";
    s.post("create", jobs, json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vj"},
        "spec": {"minAvailable": 2, "schedulerName": "volcano", "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
                 "tasks": [{"replicas": 2, "name": "worker", "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox"}]}}}]}}))
        .capture("uid", "/metadata/uid")
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.post("command", "/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands", json!({"apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"generateName": "vj-restartjob-", "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vj", "uid": "{{uid}}", "controller": true}]},
        "action": "RestartJob", "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vj", "uid": "{{uid}}"}, "reason": "rebound"}))
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.post("invalid", jobs, json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "bad"},
        "spec": {"minAvailable": "two", "tasks": [{"replicas": 1}]}}));
    s.delete("delete-job", &format!("{jobs}/vj"), None);
    s.get(
        "commands-collected",
        "/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands",
    )
    .wait(Wait::Len("/items", 0))
    .keep(Keep::Only(vec!["/body/items"]));
    Some(s)
}

fn jobset(shared: &Path) -> Option<Scenario> {
    let crd = yaml(
        &std::fs::read_to_string(shared.join("data/crds/jobset/jobset.x-k8s.io_jobsets.yaml"))
            .ok()?,
    )?;
    let mut s = Scenario::namespaced(
        "crd-jobset",
        "the real JobSet CRD: defaults of replicatedJobs, x-kubernetes-validations are evaluated by a real server",
    );
    register(
        &mut s,
        crd,
        "jobsets.jobset.x-k8s.io",
        "register",
        "established",
    );
    s.get("discovery", "/apis/jobset.x-k8s.io/v1alpha2")
        .wait(Wait::Status(200));
    let sets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets";
    s.post("create", sets, json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox"}]}}}}}]}}))
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.post("invalid", sets, json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "bad"},
        "spec": {"replicatedJobs": [{"name": "Not_A_Name", "replicas": -1, "template": {"spec": {"template": {"spec": {"containers": []}}}}}]}}));
    Some(s)
}

fn rebound() -> Option<Scenario> {
    // the CRDs `rebound crds` prints (the committed crds/ equal them)
    let by_name = |n: &str| {
        rebound_core::api::crds()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(n))
            .and_then(|c| serde_json::to_value(c).ok())
    };
    let rp = by_name("recoverypolicies.rebound.dev")?;
    let fc = by_name("faultclassifications.rebound.dev")?;
    let mut s = Scenario::namespaced(
        "crd-rebound",
        "rebound's own CRDs: printer columns, short names, status, CEL validations",
    );
    register(
        &mut s,
        rp,
        "recoverypolicies.rebound.dev",
        "register-rp",
        "rp-established",
    );
    register(
        &mut s,
        fc,
        "faultclassifications.rebound.dev",
        "register-fc",
        "fc-established",
    );
    s.get("discovery", "/apis/rebound.dev/v1alpha1")
        .wait(Wait::Status(200));
    let rps = "/apis/rebound.dev/v1alpha1/namespaces/{ns}/recoverypolicies";
    s.post("create-rp", rps, json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "RecoveryPolicy", "metadata": {"name": "default"},
        "spec": {"selector": {"kinds": ["PyTorchJob"], "matchLabels": {"kcover.io/cascading-recovery": "true"}}, "action": "RestartJob", "cooldown": "30s"}}))
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.patch("rp-status", &format!("{rps}/default/status"), MERGE, Body::Json(json!({"status": {"observedGeneration": 1, "workloads": 2,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})))
        .keep(Keep::Only(vec!["/body/status"]));
    s.get("rp-table", rps)
        .header("Accept", TABLE)
        .keep(Keep::Drop(vec!["/body/rows/*/object"]));
    s.post("create-fc", "/apis/rebound.dev/v1alpha1/faultclassifications", json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
        "metadata": {"name": "cf-xid"}, "spec": {"source": "NvidiaXid", "rules": [{"name": "bus", "codes": ["79"], "level": "Separate"}]}}))
        .keep(Keep::Drop(vec!["/body/metadata/managedFields"]));
    s.post("create-fc-invalid", "/apis/rebound.dev/v1alpha1/faultclassifications", json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
        "metadata": {"name": "cf-bad"}, "spec": {"source": "Nope", "rules": [{"name": "x", "level": "Worse"}]}}));
    s.get(
        "fc-table",
        "/apis/rebound.dev/v1alpha1/faultclassifications",
    )
    .header("Accept", TABLE)
    .keep(Keep::Drop(vec!["/body/rows/*/object"]));
    s.delete(
        "delete-rp-crd",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/recoverypolicies.rebound.dev",
        None,
    )
    .keep(Keep::Only(vec![
        "/status",
        "/body/kind",
        "/body/metadata/deletionTimestamp",
        "/body/status/conditions/*/type",
    ]));
    s.get(
        "rp-crd-gone",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/recoverypolicies.rebound.dev",
    )
    .wait(Wait::Status(404))
    .keep(Keep::StatusCode);
    s.get("rp-served-no-more", rps).wait(Wait::Status(404));
    Some(s)
}

pub(super) fn all(shared: Option<&Path>) -> Vec<Scenario> {
    let mut v: Vec<Scenario> = rebound().into_iter().collect();
    if let Some(dir) = shared {
        v.extend(pytorch(dir));
        v.extend(volcano(dir));
        v.extend(jobset(dir));
    }
    v
}
