//! Creating training jobs of each kind (PyTorchJob, Volcano Job, JobSet,
//! TrainJob, batch Job) on the cluster, optionally wired for in-place
//! restarts.

use std::collections::BTreeMap;

use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::SimError;
use crate::actors::{jobset, kubeflow, trainer, volcano};

use super::{ClusterError, SimCluster, node_name};

/// Options of the jobs the `create_*` helpers make.
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    /// Labels on the job and on its pod templates (so they reach the pods,
    /// as with real operators).
    pub labels: BTreeMap<String, String>,
    /// Restart policy: for Kubeflow the replica policy (`Never`,
    /// `OnFailure`, `Always`, `ExitCode`), otherwise the pods' policy.
    /// `None`: the kind's usual choice.
    pub restart_policy: Option<String>,
    /// Accelerators per pod; `None`: the cluster's `gpus_per_pod`.
    pub gpus_per_pod: Option<u32>,
    /// Wire the pod templates for in-place restarts as `rebound inject`
    /// does (the agent sidecar, its restart rule and barrier probe).
    pub wired: bool,
    /// Volcano: the job's `maxRetry` (`None`: Volcano's default, 3).
    pub max_retry: Option<u32>,
}

impl JobOptions {
    /// Options with these labels.
    pub fn labels(labels: &[(&str, &str)]) -> Self {
        Self {
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Self::default()
        }
    }

    /// The same with this Volcano `maxRetry`.
    pub fn max_retry(mut self, n: u32) -> Self {
        self.max_retry = Some(n);
        self
    }

    /// The same with this restart policy.
    pub fn restart_policy(mut self, policy: &str) -> Self {
        self.restart_policy = Some(policy.to_owned());
        self
    }
    /// The same, wired for in-place restarts.
    pub fn wired(mut self) -> Self {
        self.wired = true;
        self
    }
}

/// Wire a job manifest as `rebound inject` would when `opts` asks for it.
fn wire(obj: &mut Value, opts: &JobOptions) -> Result<(), ClusterError> {
    if opts.wired {
        rebound::inplace::inject::inject_document(
            obj,
            &rebound::inplace::inject::InjectOptions::default(),
            "job",
        )
        .map_err(|e| ClusterError::Unsupported(format!("rebound inject refused the job: {e}")))?;
    }
    Ok(())
}

impl SimCluster {
    fn container(&self, name: &str, opts: &JobOptions) -> Value {
        let gpus = opts.gpus_per_pod.unwrap_or(self.config.gpus_per_pod);
        let mut c = json!({
            "name": name,
            "image": "registry.local/rebound-sim/trainer:latest",
            "command": ["python", "train.py"],
        });
        if gpus > 0 {
            let r = self.config.accelerator.resource();
            c["resources"] =
                json!({"limits": {r: gpus.to_string()}, "requests": {r: gpus.to_string()}});
        }
        c
    }

    fn pod_template(&self, container: &str, opts: &JobOptions, pod_policy: Option<&str>) -> Value {
        let mut spec = json!({"containers": [self.container(container, opts)]});
        if let Some(p) = pod_policy {
            spec["restartPolicy"] = json!(p);
        }
        if let Some(sh) = &self.config.shared {
            spec["schedulerName"] = json!(sh.scheduler_name);
            spec["tolerations"] = json!([{"key": sh.taint_key, "operator": "Exists"}]);
        }
        json!({"metadata": {"labels": opts.labels}, "spec": spec})
    }

    async fn create_custom(
        &self,
        ns: &str,
        res: &kube::api::ApiResource,
        obj: Value,
    ) -> Result<DynamicObject, ClusterError> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, res);
        let obj: DynamicObject = serde_json::from_value(obj)?;
        Ok(api.create(&PostParams::default(), &obj).await?)
    }

    /// Creates a PyTorchJob with one master and `workers` workers; `labels`
    /// go on the job and its pod templates.
    pub async fn create_pytorchjob(
        &self,
        ns: &str,
        name: &str,
        workers: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        self.create_pytorchjob_with(ns, name, workers, &JobOptions::labels(labels))
            .await
    }

    /// [`Self::create_pytorchjob`] with all options.
    pub async fn create_pytorchjob_with(
        &self,
        ns: &str,
        name: &str,
        workers: u32,
        opts: &JobOptions,
    ) -> Result<DynamicObject, ClusterError> {
        let res = kubeflow::KubeflowKind::PyTorchJob.api_resource();
        let obj = self.pytorchjob_object(ns, name, workers, opts);
        self.create_custom(ns, &res, obj).await
    }

    fn pytorchjob_object(&self, ns: &str, name: &str, workers: u32, opts: &JobOptions) -> Value {
        let policy = opts
            .restart_policy
            .clone()
            .unwrap_or_else(|| "OnFailure".into());
        let replica = |n: u32| json!({"replicas": n, "restartPolicy": policy, "template": self.pod_template("pytorch", opts, None)});
        let mut specs = json!({"Master": replica(1)});
        if workers > 0 {
            specs["Worker"] = replica(workers);
        }
        json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "pytorchReplicaSpecs": specs},
        })
    }

    /// The bulk path for large simulations: creates `count` PyTorchJobs
    /// `<prefix>-<i>` (one master, `workers` workers) and their pods,
    /// already bound to nodes (spread, within accelerator capacity),
    /// in-process, without HTTP. The pods are exactly what the operator
    /// would make, so it adopts them; the kubelets then report them
    /// running. Returns the job names. Pods that fit on no node are left
    /// unbound for the scheduler. Embedded server only (see [`Self::api`]).
    pub fn bulk_pytorchjobs(
        &self,
        ns: &str,
        prefix: &str,
        count: usize,
        workers: u32,
        opts: &JobOptions,
    ) -> Result<Vec<String>, ClusterError> {
        let kind = kubeflow::KubeflowKind::PyTorchJob;
        let gpus = opts.gpus_per_pod.unwrap_or(self.config.gpus_per_pod);
        // Pods per node: as many as the accelerators allow, else the pod limit.
        let per_node = self
            .config
            .gpus_per_node
            .checked_div(gpus)
            .map_or(110, |n| n as usize);
        let mut load = vec![0usize; self.config.nodes];
        let mut next = 0usize;
        let mut place = || {
            for _ in 0..load.len() {
                let i = next % load.len();
                next += 1;
                if load[i] < per_node {
                    load[i] += 1;
                    return Some(node_name(i));
                }
            }
            None
        };
        let mut names = Vec::with_capacity(count);
        let policy = opts
            .restart_policy
            .clone()
            .unwrap_or_else(|| "OnFailure".into());
        for i in 0..count {
            let name = format!("{prefix}-{i}");
            let created = self
                .api()
                .create_object(self.pytorchjob_object(ns, &name, workers, opts))?;
            let job: DynamicObject = serde_json::from_value(created)?;
            for (rtype, replicas) in [("Master", 1), ("Worker", workers)] {
                let spec = &job.data["spec"]["pytorchReplicaSpecs"][rtype];
                for index in 0..replicas as usize {
                    let mut pod = kubeflow::make_pod(
                        kind,
                        &job,
                        rtype,
                        index,
                        spec,
                        rtype == "Master",
                        &policy,
                    );
                    if let Some(node) = place() {
                        pod["spec"]["nodeName"] = json!(node);
                    }
                    match self.api().create_object(pod) {
                        Ok(_) => {}
                        // The simulated operator saw the job first and made
                        // the pod itself (unbound; the scheduler places it):
                        // the same pod, so the set-up goes on.
                        Err(SimError::Api { source, .. })
                            if source.code == 409 && source.reason == "AlreadyExists" => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            names.push(name);
        }
        Ok(names)
    }

    /// Creates a Volcano Job with one task `worker` of `replicas` pods
    /// (minAvailable = replicas, queue `default`).
    pub async fn create_volcano_job(
        &self,
        ns: &str,
        name: &str,
        replicas: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        self.create_volcano_job_with(ns, name, replicas, &JobOptions::labels(labels), json!([]))
            .await
    }

    /// [`Self::create_volcano_job`] with all options and job-level lifecycle
    /// `policies` (a JSON list, e.g. `[{"event": "PodEvicted", "action": "RestartJob"}]`).
    pub async fn create_volcano_job_with(
        &self,
        ns: &str,
        name: &str,
        replicas: u32,
        opts: &JobOptions,
        policies: Value,
    ) -> Result<DynamicObject, ClusterError> {
        let policy = opts.restart_policy.as_deref().unwrap_or("Never");
        let mut template = self.pod_template("worker", opts, Some(policy));
        template["metadata"]["name"] = json!("worker");
        if self
            .config
            .shared
            .as_ref()
            .is_some_and(|s| s.real_operators)
        {
            // The real vc-scheduler places the pods (job.spec.schedulerName).
            if let Some(spec) = template["spec"].as_object_mut() {
                spec.remove("schedulerName");
            }
        }
        let obj = json!({
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "schedulerName": "volcano", "queue": "default", "minAvailable": replicas,
                "policies": policies,
                "tasks": [{"name": "worker", "replicas": replicas, "template": template}],
            },
        });
        let mut obj = obj;
        if let Some(n) = opts.max_retry {
            obj["spec"]["maxRetry"] = json!(n);
        }
        wire(&mut obj, opts)?;
        self.create_custom(ns, &volcano::job_resource(), obj).await
    }

    /// Creates a JobSet with one replicated job `workers` of `jobs` Indexed
    /// Jobs of `pods_per_job` pods each, restarted up to `max_restarts` times.
    pub async fn create_jobset(
        &self,
        ns: &str,
        name: &str,
        jobs: u32,
        pods_per_job: u32,
        max_restarts: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        let policy = json!({"maxRestarts": max_restarts});
        self.create_jobset_with(
            ns,
            name,
            jobs,
            pods_per_job,
            policy,
            &JobOptions::labels(labels),
        )
        .await
    }

    /// [`Self::create_jobset`] with its whole `failurePolicy` (e.g.
    /// `{"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}`) and all
    /// options.
    pub async fn create_jobset_with(
        &self,
        ns: &str,
        name: &str,
        jobs: u32,
        pods_per_job: u32,
        failure_policy: Value,
        opts: &JobOptions,
    ) -> Result<DynamicObject, ClusterError> {
        let policy = "Never";
        let mut job_spec = json!({
            "parallelism": pods_per_job, "completions": pods_per_job,
            "completionMode": "Indexed", "backoffLimit": 0,
            "template": self.pod_template("worker", opts, Some(policy)),
        });
        if failure_policy["restartStrategy"] == "InPlaceRestart" {
            // What JobSet's webhook requires of its in-place restart: the
            // Jobs never fail for a pod's failure, and a pod is replaced
            // only once it has failed.
            job_spec["backoffLimit"] = json!(i32::MAX);
            job_spec["podReplacementPolicy"] = json!("Failed");
        }
        let mut obj = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "failurePolicy": failure_policy,
                "replicatedJobs": [{"name": "workers", "replicas": jobs, "template": {
                    "metadata": {"labels": opts.labels},
                    "spec": job_spec,
                }}],
            },
        });
        wire(&mut obj, opts)?;
        self.create_custom(ns, &jobset::api_resource(), obj).await
    }

    /// Creates a Kubeflow Trainer v2 TrainJob of `nodes` training nodes and
    /// the namespaced TrainingRuntime `<name>-runtime` it runs (one
    /// replicated job `node`, the trainer step, container `node`). `labels`
    /// go on the TrainJob, into its `spec.labels` (the JobSet and Jobs, as
    /// the Trainer propagates them) and on the runtime's pod template, the
    /// one way they reach a TrainJob's pods. Runs with the JobSet operator.
    pub async fn create_trainjob(
        &self,
        ns: &str,
        name: &str,
        nodes: u32,
        labels: &[(&str, &str)],
    ) -> Result<DynamicObject, ClusterError> {
        let opts = JobOptions::labels(labels);
        let runtime = format!("{name}-runtime");
        let mut job_labels = opts.labels.clone();
        job_labels.insert(
            trainer::ANCESTOR_LABEL.into(),
            trainer::ANCESTOR_TRAINER.into(),
        );
        let rt = json!({
            "apiVersion": trainer::API_VERSION, "kind": "TrainingRuntime",
            "metadata": {"name": runtime, "namespace": ns},
            "spec": {
                "mlPolicy": {"numNodes": 1},
                // Restarts allowed, as a training runtime that resumes
                // from checkpoints sets: rebound's restart fails a child
                // Job (backoffLimit 0), which costs one of these.
                "template": {"spec": {"failurePolicy": {"maxRestarts": 3},
                    "replicatedJobs": [{"name": "node", "template": {
                    "metadata": {"labels": job_labels},
                    "spec": {
                        "parallelism": 1, "completions": 1,
                        "completionMode": "Indexed", "backoffLimit": 0,
                        "template": self.pod_template(trainer::NODE_CONTAINER, &opts, Some("Never")),
                    },
                }}]}},
            },
        });
        match self
            .create_custom(ns, &trainer::runtime_resource(false), rt)
            .await
        {
            Ok(_) => {}
            Err(ClusterError::Kube(e)) if crate::actors::util::is_conflict(&e) => {}
            Err(e) => return Err(e),
        }
        let obj = json!({
            "apiVersion": trainer::API_VERSION, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime},
                "labels": opts.labels,
                "trainer": {"numNodes": nodes},
            },
        });
        self.create_custom(ns, &trainer::trainjob_resource(), obj)
            .await
    }

    /// Creates an Indexed batch Job of `pods` pods running in parallel.
    pub async fn create_batch_job(
        &self,
        ns: &str,
        name: &str,
        pods: u32,
        labels: &[(&str, &str)],
    ) -> Result<k8s_openapi::api::batch::v1::Job, ClusterError> {
        self.create_batch_job_with(ns, name, pods, &JobOptions::labels(labels))
            .await
    }

    /// [`Self::create_batch_job`] with all options.
    pub async fn create_batch_job_with(
        &self,
        ns: &str,
        name: &str,
        pods: u32,
        opts: &JobOptions,
    ) -> Result<k8s_openapi::api::batch::v1::Job, ClusterError> {
        let mut job = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": opts.labels},
            "spec": {
                "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 6,
                "template": self.pod_template("worker", opts, Some("Never")),
            },
        });
        wire(&mut job, opts)?;
        let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(self.client.clone(), ns);
        Ok(api
            .create(&PostParams::default(), &serde_json::from_value(job)?)
            .await?)
    }
}
