//! What the tier tests share: the tiered policy, the job kinds they run
//! and how each is made and read, the order in which pods are seen to
//! start again (ranks together), and the request log's destructive and job
//! writes. Used by tiers.rs and the real-node tests.

use super::*;
use kube::ResourceExt;
use kube::api::DynamicObject;
use rebound::inplace::{AGENT_CONTAINER, RELEASED_ANNOTATION};
use rebound_sim::actors::kubelet::{KubeletConfig, PodCosts};
use rebound_sim::actors::{jobset, volcano};
use rebound_sim::cluster::{JobOptions, SimConfig};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub(super) const TIERS: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: tiers, namespace: ml}
spec:
  selector:
    matchLabels: {kcover.io/cascading-recovery: "true"}
  cooldown: 0s
  restart:
    tiers: [InPlace, ReplaceFaulty, Recreate]
    fallbackAfter: 2m
"#;

/// The job kinds of the in-place tests. The operators of the first three
/// keep the agent's restart rule under their real CRDs; Kubeflow's v1.9
/// CRDs prune it (docs/in-place.md), so a PyTorchJob's pods are wired at
/// admission (real server only: admission.rs, real_node_admission.rs).
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Volcano,
    JobSet,
    Batch,
    PyTorch,
}

/// Every test's job is named `j`.
pub(super) const JOB: &str = "j";

impl Kind {
    pub(super) fn selector(self) -> &'static str {
        match self {
            Kind::Volcano => "volcano.sh/job-name=j",
            Kind::JobSet => "jobset.sigs.k8s.io/jobset-name=j",
            Kind::Batch => "batch.kubernetes.io/job-name=j",
            Kind::PyTorch => "training.kubeflow.org/job-name=j",
        }
    }

    pub(super) fn resource(self) -> kube::api::ApiResource {
        match self {
            Kind::Volcano => volcano::job_resource(),
            Kind::JobSet => jobset::api_resource(),
            Kind::Batch => kube::api::ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
            Kind::PyTorch => super::pytorchjob_resource(),
        }
    }

    pub(super) async fn create(self, bed: &Testbed, ns: &str, n: u32, opts: &JobOptions) {
        let c = &bed.cluster;
        match self {
            Kind::Volcano => c
                .create_volcano_job_with(ns, JOB, n, opts, serde_json::json!([]))
                .await
                .map(drop),
            Kind::JobSet => c
                .create_jobset_with(ns, JOB, 1, n, serde_json::json!({"maxRestarts": 3}), opts)
                .await
                .map(drop),
            Kind::Batch => c.create_batch_job_with(ns, JOB, n, opts).await.map(drop),
            // One master, the rest workers.
            Kind::PyTorch => c
                .create_pytorchjob_with(ns, JOB, n.saturating_sub(1), opts)
                .await
                .map(drop),
        }
        .expect("create the job");
    }
}

pub(super) async fn job_annotations(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
) -> BTreeMap<String, String> {
    Api::<DynamicObject>::namespaced_with(bed.client(), ns, &kind.resource())
        .get(JOB)
        .await
        .map(|j| j.annotations().clone())
        .unwrap_or_default()
}

/// How often the pod's agent has been restarted.
pub(super) fn agent_restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.name == AGENT_CONTAINER)
        .map_or(0, |c| c.restart_count)
}

pub(super) fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

pub(super) fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// A job of `n` pods (wired or not), running; its pods.
pub(super) async fn running_job(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
    n: u32,
    wired: bool,
) -> Vec<Pod> {
    let mut opts = JobOptions::labels(&[OPT_IN]);
    if wired {
        opts = opts.wired();
    }
    kind.create(bed, ns, n, &opts).await;
    wait("the job's pods running and ready", T, || async {
        let p = running(bed, ns, kind.selector()).await;
        (p.len() >= n as usize && p.iter().all(ready)).then_some(p)
    })
    .await
}

/// The controller's requests that delete pods or restart the job by its
/// operator, as `verb path`.
pub(super) fn destructive(bed: &Testbed) -> Vec<String> {
    bed.requests()
        .iter()
        .filter(|r| by_controller(r) && r.status < 300)
        .filter(|r| {
            (r.resource == "pods" && r.verb.starts_with("delete"))
                || (r.resource == "commands" && r.verb == "create")
        })
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect()
}

/// The controller's writes of the job object.
pub(super) fn job_writes(bed: &Testbed, kind: Kind) -> usize {
    bed.requests()
        .iter()
        .filter(|r| {
            by_controller(r)
                && r.status < 300
                && r.resource == kind.resource().plural
                && r.name.as_deref() == Some(JOB)
                && matches!(r.verb, "patch" | "update")
                && !ending_mark(r)
        })
        .count()
}

/// Pod and job changes seen through watches, with their resourceVersions
/// (one etcd revision sequence on a real server, one counter on the
/// embedded one): which came first.
#[derive(Default)]
pub(super) struct Seen {
    /// resourceVersion at which the job first showed `restart-released: 1`.
    pub(super) released: Option<u64>,
    /// For each pod: resourceVersions at which a worker container ran with
    /// a higher restart count than before the fault.
    pub(super) workers_again: BTreeMap<String, Vec<u64>>,
}

impl Seen {
    /// Once the release and `n` workers running again were seen: the
    /// release's resourceVersion and the earliest worker's after it.
    pub(super) fn release_then_workers(&self, n: usize) -> Option<(u64, u64)> {
        let released = self.released?;
        (self.workers_again.len() == n).then(|| {
            let first = self
                .workers_again
                .values()
                .filter_map(|v| v.iter().min().copied())
                .min()
                .unwrap_or(0);
            (released, first)
        })
    }
}

fn rv(m: &kube::api::ObjectMeta) -> u64 {
    m.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(super) fn watch_order(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
    before: BTreeMap<String, i32>,
) -> Arc<Mutex<Seen>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen = Arc::new(Mutex::new(Seen::default()));
    let pods: Api<Pod> = Api::namespaced(bed.client(), ns);
    let s = seen.clone();
    tokio::spawn(async move {
        let mut w = watcher(pods, watcher::Config::default().labels(kind.selector()))
            .applied_objects()
            .boxed();
        while let Some(Ok(p)) = w.next().await {
            let main = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .find(|c| training_container(&c.name))
                .cloned();
            let name = p.name_any();
            if let Some(c) = main
                && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some()
                && before.get(&name).is_some_and(|b| c.restart_count > *b)
            {
                let mut g = s.lock().expect("seen");
                g.workers_again
                    .entry(name)
                    .or_default()
                    .push(rv(&p.metadata));
            }
        }
    });
    let jobs: Api<DynamicObject> = Api::namespaced_with(bed.client(), ns, &kind.resource());
    let s = seen.clone();
    tokio::spawn(async move {
        let mut w = watcher(jobs, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(j)) = w.next().await {
            if j.annotations().get(RELEASED_ANNOTATION).map(String::as_str) == Some("1") {
                let mut g = s.lock().expect("seen");
                g.released.get_or_insert(rv(&j.metadata));
            }
        }
    });
    seen
}

pub(super) fn worker_restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find(|c| training_container(&c.name))
        .map_or(0, |c| c.restart_count)
}

/// Whether a container is the pod's training process: `worker` in the
/// tests' own templates, `pytorch` where the real training-operator
/// requires that name.
pub(super) fn training_container(name: &str) -> bool {
    name == "worker" || name == "pytorch"
}

/// A cluster whose simulated containers take `start` to start.
pub(super) fn starting_in(start: &str) -> SimConfig {
    let costs = PodCosts::parse(&format!("zero,start={start}")).expect("costs");
    SimConfig {
        kubelet: KubeletConfig {
            costs,
            ..KubeletConfig::default()
        },
        ..SimConfig::default()
    }
}
