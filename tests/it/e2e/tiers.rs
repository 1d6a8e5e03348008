//! Recovery tiers end to end: jobs wired by `rebound inject` restart in
//! place (nothing deleted, two writes, all ranks start together), only the
//! pods on a faulty node are replaced, unwired jobs fall back to Recreate,
//! and a JobSet with its own InPlaceRestart has only the faulty node's pods
//! deleted. The simulated kubelets run the real agent in every wired pod.

use super::*;
use kube::ResourceExt;
use kube::api::DynamicObject;
use rebound::inplace::{AGENT_CONTAINER, GENERATION_ANNOTATION, RELEASED_ANNOTATION};
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
                .find(|c| c.name == "worker")
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
        .find(|c| c.name == "worker")
        .map_or(0, |c| c.restart_count)
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

/// A wired job restarts in place in two writes, its ranks start together,
/// and a second fault during the restart is covered by it.
async fn in_place(server: Server, kind: Kind) {
    // Containers take a second to start, so that the restart surely lasts
    // past the second fault (with no costs it can be over before it).
    let cfg = starting_in("1s");
    let (bed, ctl) = bed_with(server, 4, TIERS, Some(cfg)).await;
    let ml = bed.ns("ml");
    let pods = running_job(&bed, &ml, kind, 3, true).await;
    let uids: Vec<String> = pods.iter().map(uid).collect();
    let before: BTreeMap<String, i32> = pods
        .iter()
        .map(|p| (p.name_any(), worker_restarts(p)))
        .collect();
    let seen = watch_order(&bed, &ml, kind, before);
    let node = node_name(&pods[0]);
    // A software fault (XID 13, RestartJob) under one pod of the job.
    xid_condition(&bed, &node, "13").await;
    wait("generation 1 raised", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    // A second fault during the restart (cooldown 0s: only the recovery
    // in progress stops a second one).
    let other = pods
        .iter()
        .map(node_name)
        .find(|n| *n != node)
        .unwrap_or_else(|| node.clone());
    let a = job_annotations(&bed, &ml, kind).await;
    assert_ne!(
        a.get(RELEASED_ANNOTATION).map(String::as_str),
        Some("1"),
        "the second fault comes before the release"
    );
    xid_condition(&bed, &other, "31").await;
    let after = wait("every pod back in place, released", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        let p = running(&bed, &ml, kind.selector()).await;
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1")
            && p.len() == 3
            && p.iter().all(|p| ready(p) && agent_restarts(p) >= 1))
        .then_some(p)
    })
    .await;
    // Same pods: nothing deleted, nothing recreated.
    let mut now: Vec<String> = after.iter().map(uid).collect();
    let mut was = uids.clone();
    now.sort();
    was.sort();
    assert_eq!(now, was, "the same pods");
    assert_eq!(destructive(&bed), Vec::<String>::new());
    // Two writes of the job: the record with the generation, the release.
    wait("both writes logged", T, || async {
        (job_writes(&bed, kind) >= 2).then_some(())
    })
    .await;
    // Every rank's worker started again only after the release.
    let s = wait("every worker seen running again", T, || async {
        seen.lock().expect("seen").release_then_workers(3)
    })
    .await;
    assert!(
        s.1 > s.0,
        "a worker ran again (rv {}) before the barrier was released (rv {})",
        s.1,
        s.0
    );
    // Let the second fault be decided: still one recovery.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = job_annotations(&bed, &ml, kind).await;
    assert_eq!(
        a.get("rebound.dev/restart-count").map(String::as_str),
        Some("1")
    );
    assert_eq!(a.get(GENERATION_ANNOTATION).map(String::as_str), Some("1"));
    assert_eq!(job_writes(&bed, kind), 2, "one record, one release");
    ctl.shutdown().await;
}

async fn only_the_pod_on_a_faulty_node_is_replaced_the_others_restart_in_place(server: Server) {
    let (bed, ctl) = bed_with(server, 4, TIERS, None).await;
    let ml = bed.ns("ml");
    let kind = Kind::Volcano;
    let pods = running_job(&bed, &ml, kind, 3, true).await;
    // The node with the fewest of the job's pods is the faulty one, so pods
    // on other nodes remain to restart in place even when the scheduler
    // placed two on one node.
    let victim = pods
        .iter()
        .min_by_key(|v| pods.iter().filter(|p| node_name(p) == node_name(v)).count())
        .cloned()
        .expect("the job has pods");
    let node = node_name(&victim);
    let stay: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(&node))
        .map(uid)
        .collect();
    assert!(
        !stay.is_empty(),
        "every pod of the job on one node: nothing left to restart in place"
    );
    // XID 79 (Separate): the node is taken out; its pod must move.
    xid_condition(&bed, &node, "79").await;
    let after = wait("replaced and restarted in place, released", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        let p = running(&bed, &ml, kind.selector()).await;
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1")
            && p.len() == 3
            && p.iter().all(ready)
            && !p.iter().any(|p| uid(p) == uid(&victim)))
        .then_some(p)
    })
    .await;
    for p in &after {
        if stay.contains(&uid(p)) {
            assert!(
                agent_restarts(p) >= 1,
                "{} restarted in place",
                p.name_any()
            );
        } else {
            assert_ne!(
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
                Some(node.as_str()),
                "the replacement runs elsewhere"
            );
        }
    }
    assert_eq!(
        after.iter().filter(|p| stay.contains(&uid(p))).count(),
        stay.len(),
        "the pods on healthy nodes stayed"
    );
    // The scheduler may have placed more than one of the job's pods on the
    // faulty node: exactly those are deleted, each once, and no other.
    let mut moved: Vec<String> = pods
        .iter()
        .filter(|p| !stay.contains(&uid(p)))
        .map(|p| format!("delete /api/v1/namespaces/{ml}/pods/{}", p.name_any()))
        .collect();
    moved.sort();
    let mut d = destructive(&bed);
    d.sort();
    assert_eq!(d, moved, "exactly the pods on the faulty node deleted");
    assert!(cordoned(&super::node(&bed, &node).await));
    ctl.shutdown().await;
}

async fn an_unwired_job_falls_back_to_recreate_and_says_why(server: Server) {
    let (bed, ctl) = bed_with(server, 4, TIERS, None).await;
    let ml = bed.ns("ml");
    let kind = Kind::Volcano;
    let pods = running_job(&bed, &ml, kind, 2, false).await;
    let node = node_name(&pods[0]);
    xid_condition(&bed, &node, "13").await;
    wait("restarted by a Volcano Command", T, || async {
        (!requests(&bed, "create", "commands", "").is_empty()).then_some(())
    })
    .await;
    let notes = restarted_notes(&bed, &ml).await;
    assert!(
        notes.iter().any(|n| n.contains("lack the in-place wiring")),
        "{notes:?}"
    );
    let a = job_annotations(&bed, &ml, kind).await;
    // A Recreate releases its generation at once: new pods start at once.
    assert_eq!(a.get(GENERATION_ANNOTATION), a.get(RELEASED_ANNOTATION));
    ctl.shutdown().await;
}

async fn a_jobset_with_its_own_in_place_restart_loses_only_the_faulty_nodes_pod(server: Server) {
    let (bed, ctl) = bed_with(server, 4, TIERS, None).await;
    let ml = bed.ns("ml");
    bed.cluster
        .create_jobset_with(
            &ml,
            "js",
            2,
            1,
            serde_json::json!({"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}),
            &JobOptions::labels(&[OPT_IN]),
        )
        .await
        .expect("create the JobSet");
    let sel = "jobset.sigs.k8s.io/jobset-name=js";
    let pods = wait("the JobSet's pods running", T, || async {
        let p = running(&bed, &ml, sel).await;
        (p.len() >= 2).then_some(p)
    })
    .await;
    let nodes: Vec<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    // A software fault: JobSet's own protocol restarts in place; rebound
    // leaves it.
    xid_condition(&bed, &nodes[0], "13").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(destructive(&bed), Vec::<String>::new());
    // A node fault: the pod there must move; only it is deleted.
    let on_node: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&nodes[1]))
        .map(|p| p.name_any())
        .collect();
    xid_condition(&bed, &nodes[1], "79").await;
    let d = wait("the faulty node's pod deleted", T, || async {
        let d = destructive(&bed);
        (!d.is_empty()).then_some(d)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let d2 = destructive(&bed);
    assert_eq!(d, d2, "nothing more deleted");
    assert_eq!(d.len(), on_node.len(), "{d:?} vs {on_node:?}");
    for p in &on_node {
        assert!(
            d.iter()
                .any(|r| r.starts_with("delete ") && r.ends_with(&format!("/pods/{p}"))),
            "{d:?}"
        );
    }
    ctl.shutdown().await;
}

async fn a_wired_volcano_job_restarts_in_place_in_two_writes_its_ranks_together(server: Server) {
    in_place(server, Kind::Volcano).await;
}

async fn a_wired_jobset_restarts_in_place_in_two_writes_its_ranks_together(server: Server) {
    in_place(server, Kind::JobSet).await;
}

async fn a_wired_batch_job_restarts_in_place_in_two_writes_its_ranks_together(server: Server) {
    in_place(server, Kind::Batch).await;
}

e2e!(a_wired_volcano_job_restarts_in_place_in_two_writes_its_ranks_together);
e2e!(a_wired_jobset_restarts_in_place_in_two_writes_its_ranks_together);
e2e!(a_wired_batch_job_restarts_in_place_in_two_writes_its_ranks_together);
e2e!(only_the_pod_on_a_faulty_node_is_replaced_the_others_restart_in_place);
e2e!(an_unwired_job_falls_back_to_recreate_and_says_why);
e2e!(a_jobset_with_its_own_in_place_restart_loses_only_the_faulty_nodes_pod);
