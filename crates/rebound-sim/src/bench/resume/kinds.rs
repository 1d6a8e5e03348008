//! The job kinds `rebound sim --scenario resume --job-kind` measures: the
//! manifests of one wired training job of each kind (the same pods for
//! every kind: a `setup` init container, one worker with a readiness probe,
//! wired by `rebound inject`'s code), which pods belong to it, and which
//! component creates them.

use kube::api::ApiResource;
use serde_json::{Value, json};

use super::super::env::SimEnv;
use super::PodShape;
use crate::actors::{jobset, kubeflow, trainer, volcano};
use rebound::inplace::inject::{
    BATCH_JOB_NAME_LABEL, InjectOptions, JOBSET_NAME_LABEL, KUBEFLOW_JOB_NAME_LABEL,
    VOLCANO_JOB_NAME_LABEL, inject_document,
};

/// A job kind of the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// `batch.volcano.sh/v1alpha1` Job (the default).
    Volcano,
    /// `kubeflow.org/v1` PyTorchJob (training-operator v1): one master,
    /// the rest workers.
    PyTorchJob,
    /// `trainer.kubeflow.org/v1alpha1` TrainJob over a TrainingRuntime:
    /// one JobSet, one Job of `pods` pods.
    TrainJob,
    /// `jobset.x-k8s.io/v1alpha2` JobSet: one replicated Job of `pods` pods.
    JobSet,
    /// `batch/v1` Indexed Job of `pods` pods.
    Job,
}

/// The `--job-kind` values.
pub const KIND_NAMES: [&str; 5] = ["volcano", "pytorchjob", "trainjob", "jobset", "job"];

/// The label on the pods of each tier's job (and the selector of the
/// tier's policy).
pub const TIER_LABEL: &str = "rebound.dev/sim-resume-tier";

impl JobKind {
    /// The kind a `--job-kind` value names.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "volcano" => Self::Volcano,
            "pytorchjob" => Self::PyTorchJob,
            "trainjob" => Self::TrainJob,
            "jobset" => Self::JobSet,
            "job" => Self::Job,
            _ => return None,
        })
    }

    /// The job object rebound records restarts and generations on.
    pub fn resource(self) -> ApiResource {
        match self {
            Self::Volcano => volcano::job_resource(),
            Self::PyTorchJob => kubeflow::KubeflowKind::PyTorchJob.api_resource(),
            Self::TrainJob => trainer::trainjob_resource(),
            Self::JobSet => jobset::api_resource(),
            Self::Job => ApiResource {
                group: "batch".into(),
                version: "v1".into(),
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                plural: "jobs".into(),
            },
        }
    }

    /// The storage key of the job's kind (watch events counted per key).
    pub fn storage_key(self) -> String {
        let r = self.resource();
        format!("{}/{}", r.group, r.plural)
    }

    /// The label selector of the pods of job `name`.
    pub fn selector(self, name: &str) -> String {
        let label = match self {
            Self::Volcano => VOLCANO_JOB_NAME_LABEL,
            Self::PyTorchJob => KUBEFLOW_JOB_NAME_LABEL,
            // A TrainJob's JobSet has the TrainJob's name.
            Self::TrainJob | Self::JobSet => JOBSET_NAME_LABEL,
            Self::Job => BATCH_JOB_NAME_LABEL,
        };
        format!("{label}={name}")
    }

    /// The worker container (the one the fault fails).
    pub fn worker(self) -> &'static str {
        match self {
            Self::PyTorchJob => "pytorch",
            Self::TrainJob => trainer::NODE_CONTAINER,
            _ => "worker",
        }
    }

    /// Which component creates the pods, and under which client limit.
    pub fn pods_from(self, real_control_plane: bool) -> &'static str {
        match (self, real_control_plane) {
            (Self::Volcano, _) => {
                "the simulated volcano-controller-manager (client 50/s, burst 100; sequential killPods), bound by the simulated vc-scheduler (2000/s, burst 2000, gangs per 1 s session)"
            }
            (Self::PyTorchJob, _) => {
                "the simulated Kubeflow training-operator v1 (client 20/s, burst 30), bound by the simulated kube-scheduler (50/s, burst 100)"
            }
            (Self::TrainJob | Self::JobSet | Self::Job, true) => {
                "the real kube-controller-manager's Job controller of --assets (its defaults: client 20/s, burst 30, slow start, 500 per sync), bound by the simulated kube-scheduler (50/s, burst 100)"
            }
            (Self::TrainJob | Self::JobSet | Self::Job, false) => {
                "the simulated Job controller (client 20/s, burst 30, slow start 1, 2, 4, … at most 500 per sync), bound by the simulated kube-scheduler (50/s, burst 100)"
            }
        }
    }

    /// A one-line description for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Volcano => {
                "Volcano Job (batch.volcano.sh/v1alpha1), minAvailable = replicas; Recreate is a RestartJob Command"
            }
            Self::PyTorchJob => {
                "PyTorchJob (kubeflow.org/v1), 1 master + workers; Recreate deletes the pods, the operator recreates them"
            }
            Self::TrainJob => {
                "TrainJob (trainer.kubeflow.org/v1alpha1) over a TrainingRuntime: a JobSet of one Job; Recreate deletes the pods"
            }
            Self::JobSet => {
                "JobSet (jobset.x-k8s.io/v1alpha2) of one Indexed Job; Recreate deletes the pods"
            }
            Self::Job => "batch Job (batch/v1), Indexed; Recreate deletes the pods",
        }
    }

    /// The objects to create for the tier's job `name` of `pods` pods, in
    /// order, each with its resource; every pod template wired as
    /// `rebound inject` wires it, placed as `env` places pods.
    pub fn manifests(
        self,
        env: &SimEnv,
        name: &str,
        tier: &str,
        pods: usize,
    ) -> anyhow::Result<Vec<(ApiResource, Value)>> {
        let placement = if env.bed.runs_real_operators() {
            Placement::RealOperators
        } else if let Some(sh) = &env.bed.cluster.config().shared {
            Placement::Shared {
                // kube-scheduler's default profile with --real-scheduler;
                // the simulated one's name otherwise (it serves only that
                // name).
                scheduler: if env.real_scheduler {
                    super::DEFAULT_SCHEDULER.to_owned()
                } else {
                    sh.scheduler_name.clone()
                },
                taint_key: sh.taint_key.clone(),
            }
        } else {
            Placement::Embedded
        };
        self.manifests_in(&env.ns, &placement, name, tier, pods)
    }

    /// What a pod of this kind's job runs (the floors and KWOK's pod times
    /// are computed from it): the wired template of [`Self::manifests`].
    pub fn pod_shape(self) -> anyhow::Result<PodShape> {
        let docs = self.manifests_in("shape", &Placement::Embedded, "shape", "InPlace", 2)?;
        docs.iter()
            .find_map(|(_, d)| PodShape::of_manifest(d))
            .ok_or_else(|| anyhow::anyhow!("the {self:?} manifests have no pod template"))
    }

    /// [`Self::manifests`] in namespace `ns`, pods placed by `placement`.
    fn manifests_in(
        self,
        ns: &str,
        placement: &Placement,
        name: &str,
        tier: &str,
        pods: usize,
    ) -> anyhow::Result<Vec<(ApiResource, Value)>> {
        let labels = json!({TIER_LABEL: tier});
        let (policy, container) = match self {
            Self::Volcano => ("OnFailure", "worker"),
            Self::PyTorchJob => ("OnFailure", "pytorch"),
            // The kubelet restarts the failed worker (OnFailure) while rebound
            // restarts the whole pod: with `Never` the pod would fail and
            // its Job replace it, which no in-place restart can avoid.
            Self::TrainJob => ("OnFailure", trainer::NODE_CONTAINER),
            Self::JobSet | Self::Job => ("OnFailure", "worker"),
        };
        let mut spec = json!({
            "initContainers": [{"name": "setup", "image": "busybox", "command": ["sh", "-c", "true"]}],
            "containers": [{"name": container, "image": "trainer", "command": ["python", "train.py"],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5}}],
        });
        if self != Self::PyTorchJob {
            spec["restartPolicy"] = json!(policy);
        }
        match placement {
            Placement::Embedded => {}
            // On the real operators (`--real-operators`) the nodes are
            // KWOK's, untainted: kube-scheduler's default profile places
            // the pods, and Volcano's keep the job's `schedulerName`
            // (vc-scheduler), which its controller copies into each pod.
            Placement::RealOperators => {
                if self != Self::Volcano {
                    spec["schedulerName"] = json!(super::DEFAULT_SCHEDULER);
                }
            }
            Placement::Shared {
                scheduler,
                taint_key,
            } => {
                spec["schedulerName"] = json!(scheduler);
                spec["tolerations"] = json!([{"key": taint_key, "operator": "Exists"}]);
            }
        }
        let template = json!({"metadata": {"labels": labels}, "spec": spec});
        let n = i64::try_from(pods)?;
        // A Job counts its pods' container restarts (OnFailure) against
        // `backoffLimit`, in-place restarts included, and a real Job
        // controller counts pods deleted by a recreate as failed: room for
        // a few restarts of every pod.
        let backoff = n.saturating_mul(4);
        let job_template = |parallel: i64, backoff: i64| {
            json!({"metadata": {"labels": labels},
                "spec": {"parallelism": parallel, "completions": parallel, "completionMode": "Indexed",
                    "backoffLimit": backoff, "template": template}})
        };
        let meta = json!({"name": name, "namespace": ns, "labels": labels});
        let mut out = Vec::new();
        let mut doc = match self {
            Self::Volcano => {
                let mut t = template.clone();
                t["metadata"]["name"] = json!("worker");
                json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
                    "spec": {"schedulerName": "volcano", "queue": "default", "minAvailable": n,
                        "tasks": [{"name": "worker", "replicas": n, "template": t}]}})
            }
            Self::PyTorchJob => {
                let replica =
                    |r: i64| json!({"replicas": r, "restartPolicy": policy, "template": template});
                let mut specs = json!({"Master": replica(1)});
                if n > 1 {
                    specs["Worker"] = replica(n - 1);
                }
                json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                    "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": specs}})
            }
            Self::JobSet => {
                json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
                "spec": {"failurePolicy": {"maxRestarts": 3},
                    "replicatedJobs": [{"name": "workers", "replicas": 1, "template": job_template(n, backoff)}]}})
            }
            Self::Job => {
                let mut j = job_template(n, backoff);
                j["apiVersion"] = json!("batch/v1");
                j["kind"] = json!("Job");
                j["metadata"] = meta;
                j
            }
            Self::TrainJob => {
                let runtime = format!("{name}-runtime");
                let mut jt = job_template(1, backoff);
                jt["metadata"]["labels"][trainer::ANCESTOR_LABEL] =
                    json!(trainer::ANCESTOR_TRAINER);
                let mut rt = json!({"apiVersion": trainer::API_VERSION, "kind": "TrainingRuntime",
                    "metadata": {"name": runtime, "namespace": ns},
                    "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"failurePolicy": {"maxRestarts": 3},
                        "replicatedJobs": [{"name": "node", "template": jt}]}}}});
                wire(&mut rt, name)?;
                out.push((trainer::runtime_resource(false), rt));
                json!({"apiVersion": trainer::API_VERSION, "kind": "TrainJob", "metadata": meta,
                    "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime},
                        "labels": labels, "trainer": {"numNodes": n}}})
            }
        };
        if self != Self::TrainJob {
            wire(&mut doc, name)?;
        }
        out.push((self.resource(), doc));
        Ok(out)
    }
}

/// Where a job's pods go, as its template says.
#[derive(Debug, Clone)]
enum Placement {
    /// The embedded server: the simulated scheduler binds every pod.
    Embedded,
    /// A shared cluster: the scheduler named, the simulated nodes' taint
    /// tolerated.
    Shared {
        /// `spec.schedulerName`.
        scheduler: String,
        /// The simulated nodes' `NoSchedule` taint.
        taint_key: String,
    },
    /// The real operators on KWOK's nodes.
    RealOperators,
}

fn wire(doc: &mut Value, name: &str) -> anyhow::Result<()> {
    let report = inject_document(doc, &InjectOptions::default(), name)
        .map_err(|e| anyhow::anyhow!("rebound inject refused the job: {e}"))?;
    anyhow::ensure!(
        report.templates >= 1 && report.changed,
        "rebound inject did not wire the job's template: {report:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_name_parses_and_selects_its_pods() {
        for n in KIND_NAMES {
            let k = JobKind::parse(n).expect(n);
            assert!(k.selector("j").ends_with("=j"), "{n}");
            assert!(!k.storage_key().starts_with('/'), "{n}");
        }
        assert_eq!(JobKind::parse("tfjob"), None);
        assert_eq!(JobKind::Job.storage_key(), "batch/jobs");
        assert_eq!(
            JobKind::TrainJob.selector("t"),
            "jobset.sigs.k8s.io/jobset-name=t"
        );
    }

    #[test]
    fn every_kind_runs_the_same_wired_pod() {
        // KWOK gives every pod of a --real-operators run one start, and
        // the floors of the kinds compare: the same pod for every kind.
        let want = PodShape {
            regular_inits: 1,
            sidecars: 1,
            containers: 1,
            probed: true,
        };
        for n in KIND_NAMES {
            let k = JobKind::parse(n).expect(n);
            assert_eq!(k.pod_shape().expect(n), want, "{n}");
        }
    }
}
