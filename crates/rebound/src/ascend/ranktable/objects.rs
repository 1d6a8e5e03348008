//! What the rank tables keep of watched objects: jobs (their task layout and
//! restart annotations) and pods (their job, place and device annotation),
//! trimmed at once so thousands of pods cost little memory. Pure.

use super::table::{self, Group, Member, NPU_RESOURCE, RANK_INDEX_ANNOTATION};
use crate::api::policy::WorkloadKind;
use crate::k8s::time::to_chrono;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::BTreeMap;

/// Volcano's pod label naming the job.
pub const VOLCANO_JOB_LABEL: &str = "volcano.sh/job-name";
/// Volcano's pod label naming the task.
pub const VOLCANO_TASK_LABEL: &str = "volcano.sh/task-spec";
/// Volcano's task index (label, and annotation in older Volcano).
pub const VOLCANO_INDEX: &str = "volcano.sh/task-index";
/// The label HCCL-Controller expects on a Deployment's pods.
pub const DEPLOY_LABEL: &str = "deploy-name";
/// The batch Job controller's pod labels (current and legacy).
pub const BATCH_JOB_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];
/// An Indexed Job's pod index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The job kinds HCCL-Controller builds tables for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKind {
    /// `batch.volcano.sh` Job.
    Volcano,
    /// `batch/v1` Job.
    Batch,
    /// `apps/v1` Deployment.
    Deployment,
}

impl JobKind {
    /// The kind as rebound's policies name it, where rebound restarts it
    /// (Deployments it never restarts).
    pub fn workload(self) -> Option<WorkloadKind> {
        match self {
            JobKind::Volcano => Some(WorkloadKind::VolcanoJob),
            JobKind::Batch => Some(WorkloadKind::Job),
            JobKind::Deployment => None,
        }
    }

    /// For logs and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Volcano => "VolcanoJob",
            JobKind::Batch => "Job",
            JobKind::Deployment => "Deployment",
        }
    }
}

/// A job's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobKey {
    pub kind: JobKind,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// A labelled job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEntry {
    pub key: JobKey,
    pub uid: Option<String>,
    pub groups: Vec<Group>,
    pub annotations: BTreeMap<String, String>,
}

/// NPUs a pod template asks for (limits of all containers).
fn npus(template: &Value) -> u32 {
    template["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let q = &c["resources"]["limits"][NPU_RESOURCE];
            q.as_str()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .or_else(|| q.as_u64().and_then(|n| u32::try_from(n).ok()))
        })
        .sum()
}

fn replicas(v: &Value) -> u32 {
    v.as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(1)
}

/// A job of `kind` as the tables need it; `None` for an object without
/// name or namespace.
pub fn job_entry(kind: JobKind, obj: &DynamicObject) -> Option<JobEntry> {
    let name = obj.metadata.name.clone()?;
    let namespace = obj.metadata.namespace.clone()?;
    let spec = &obj.data["spec"];
    let groups = match kind {
        JobKind::Volcano => spec["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| Group {
                name: t["name"].as_str().unwrap_or_default().to_string(),
                replicas: replicas(&t["replicas"]),
                npus_per_pod: npus(&t["template"]),
            })
            .collect(),
        JobKind::Batch => vec![Group {
            name: name.clone(),
            replicas: replicas(&spec["parallelism"]),
            npus_per_pod: npus(&spec["template"]),
        }],
        JobKind::Deployment => vec![Group {
            name: name.clone(),
            replicas: replicas(&spec["replicas"]),
            npus_per_pod: npus(&spec["template"]),
        }],
    };
    Some(JobEntry {
        key: JobKey {
            kind,
            namespace,
            name,
        },
        uid: obj.metadata.uid.clone(),
        groups,
        annotations: obj.annotations().clone(),
    })
}

/// A labelled pod, trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct PodEntry {
    pub name: String,
    pub uid: String,
    pub job: JobKey,
    /// Volcano task name.
    pub task: Option<String>,
    /// The uid of its controller owner (job or ReplicaSet).
    pub owner_uid: Option<String>,
    pub created: Option<DateTime<Utc>>,
    /// Has a deletionTimestamp: going, no longer part of a table.
    pub deleting: bool,
    pub rank_index: Option<String>,
    pub task_index: Option<String>,
    pub completion_index: Option<String>,
    /// The device plugin's annotation, unparsed.
    pub device: Option<String>,
}

/// The pod's job from its labels (Volcano, then Deployment, then batch Job,
/// as HCCL-Controller's `getWorkName` looks); `None` for a pod of none.
pub fn pod_entry(pod: &Pod) -> Option<PodEntry> {
    let labels = pod.labels();
    let ann = pod.annotations();
    let namespace = pod.metadata.namespace.clone()?;
    let (kind, job) = if let Some(j) = labels.get(VOLCANO_JOB_LABEL) {
        (JobKind::Volcano, j)
    } else if let Some(j) = labels.get(DEPLOY_LABEL) {
        (JobKind::Deployment, j)
    } else if let Some(j) = BATCH_JOB_LABELS.iter().find_map(|l| labels.get(*l)) {
        (JobKind::Batch, j)
    } else {
        return None;
    };
    let owner_uid = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone());
    Some(PodEntry {
        name: pod.metadata.name.clone()?,
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        job: JobKey {
            kind,
            namespace,
            name: job.clone(),
        },
        task: labels.get(VOLCANO_TASK_LABEL).cloned(),
        owner_uid,
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| to_chrono(&t.0)),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        rank_index: ann.get(RANK_INDEX_ANNOTATION).cloned(),
        task_index: labels
            .get(VOLCANO_INDEX)
            .or_else(|| ann.get(VOLCANO_INDEX))
            .cloned(),
        completion_index: ann
            .get(COMPLETION_INDEX)
            .or_else(|| labels.get(COMPLETION_INDEX))
            .cloned(),
        device: ann.get(table::DEVICE_ANNOTATION).cloned(),
    })
}

/// Whether the pod belongs to this incarnation of the job: not going, and
/// owned by it when both uids are known (a job deleted and created again
/// under the same name leaves old pods behind for a while). Deployment pods
/// are owned by ReplicaSets: not checked.
pub fn current(job: &JobEntry, pod: &PodEntry) -> bool {
    if pod.deleting {
        return false;
    }
    match (job.key.kind, &job.uid, &pod.owner_uid) {
        (JobKind::Deployment, _, _) => true,
        (_, Some(j), Some(p)) => j == p,
        _ => true,
    }
}

/// The table members among the job's current pods. Pods without the
/// annotation yet are waited for; a bad annotation is reported through
/// `bad` and the pod left out.
pub fn members<'a>(
    job: &JobEntry,
    pods: impl Iterator<Item = &'a PodEntry>,
    mut bad: impl FnMut(&PodEntry, table::AnnotationError),
) -> Vec<Member> {
    let mut out = Vec::new();
    for p in pods.filter(|p| current(job, p)) {
        let group = p
            .task
            .as_ref()
            .and_then(|t| job.groups.iter().position(|g| &g.name == t))
            .unwrap_or(0);
        if job.groups.get(group).is_none_or(|g| g.npus_per_pod == 0) {
            continue;
        }
        let Some(raw) = &p.device else { continue };
        match table::parse_instance(raw) {
            Ok(instance) => out.push(Member {
                pod: p.name.clone(),
                group,
                hint: table::rank_hint(
                    p.rank_index.as_deref(),
                    p.task_index.as_deref(),
                    p.completion_index.as_deref(),
                    &job.groups,
                    group,
                ),
                instance,
            }),
            Err(e) => bad(p, e),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vcjob() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "vj", "namespace": "ml", "uid": "J1",
                         "labels": {"ring-controller.atlas": "ascend-910"}},
            "spec": {"tasks": [
                {"name": "launcher", "replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}},
                {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [
                    {"name": "c", "resources": {"limits": {"huawei.com/Ascend910": "8"}}}]}}},
            ]},
        }))
        .expect("job")
    }

    fn pod(name: &str, index: &str, owner: &str, device: Option<&str>) -> Pod {
        let mut ann = serde_json::Map::new();
        if let Some(d) = device {
            ann.insert(table::DEVICE_ANNOTATION.into(), json!(d));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("u-{name}"),
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"volcano.sh/job-name": "vj", "volcano.sh/task-spec": "worker",
                           "volcano.sh/task-index": index, "ring-controller.atlas": "ascend-910"},
                "annotations": ann,
                "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                    "name": "vj", "uid": owner, "controller": true}]},
        }))
        .expect("pod")
    }

    const DEV: &str = r#"{"pod_name":"p","server_id":"10.0.0.1","devices":[{"device_id":"0","device_ip":"192.168.0.1"}]}"#;

    #[test]
    fn a_volcano_job_has_its_tasks_as_groups() {
        let j = job_entry(JobKind::Volcano, &vcjob()).expect("entry");
        assert_eq!(j.key.to_string(), "VolcanoJob/ml/vj");
        assert_eq!(j.groups[1].npus_per_pod, 8);
        assert_eq!(j.groups[0].npus_per_pod, 0);
        assert_eq!(table::expected(&j.groups), 2);
    }

    #[test]
    fn members_are_current_annotated_npu_pods_and_bad_ones_are_reported() {
        let j = job_entry(JobKind::Volcano, &vcjob()).expect("entry");
        let pods: Vec<PodEntry> = [
            pod("vj-worker-0", "0", "J1", Some(DEV)),
            pod("vj-worker-1", "1", "J1", None),
            pod("vj-worker-2", "2", "OLD", Some(DEV)),
            pod("vj-worker-3", "3", "J1", Some("{broken")),
        ]
        .iter()
        .map(|p| pod_entry(p).expect("entry"))
        .collect();
        let mut bad = Vec::new();
        let ms = members(&j, pods.iter(), |p, e| {
            bad.push((p.name.clone(), e.to_string()))
        });
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].pod, "vj-worker-0");
        assert_eq!((ms[0].group, ms[0].hint), (1, Some(0)));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, "vj-worker-3");
        let mut going = pods[0].clone();
        going.deleting = true;
        assert!(!current(&j, &going));
    }

    #[test]
    fn batch_jobs_and_deployments_are_one_group_named_after_them() {
        let dep: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ml"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"huawei.com/Ascend910": 2}}}]}}},
        }))
        .expect("deployment");
        let d = job_entry(JobKind::Deployment, &dep).expect("entry");
        assert_eq!(
            d.groups,
            vec![Group {
                name: "d".into(),
                replicas: 3,
                npus_per_pod: 2
            }]
        );
        let bj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "b", "namespace": "ml"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"huawei.com/Ascend910": "8"}}}]}}},
        }))
        .expect("job");
        let b = job_entry(JobKind::Batch, &bj).expect("entry");
        assert_eq!(
            (b.groups[0].replicas, b.groups[0].npus_per_pod),
            (1, 8),
            "parallelism defaults to 1"
        );
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "d-x", "namespace": "ml",
            "labels": {"deploy-name": "d"}}}))
        .expect("pod");
        assert_eq!(
            pod_entry(&p).expect("entry").job.to_string(),
            "Deployment/ml/d"
        );
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "b-0", "namespace": "ml",
            "labels": {"batch.kubernetes.io/job-name": "b"},
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}}))
        .expect("pod");
        let e = pod_entry(&p).expect("entry");
        assert_eq!(
            (e.job.to_string(), e.completion_index.as_deref()),
            ("Job/ml/b".to_string(), Some("0"))
        );
    }

    #[test]
    fn pods_of_no_known_job_kind_are_skipped() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "ml"}}))
            .expect("pod");
        assert_eq!(pod_entry(&p), None);
    }
}
