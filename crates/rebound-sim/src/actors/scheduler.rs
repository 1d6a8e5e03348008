//! The scheduler: binds every pod without `spec.nodeName` to a Ready,
//! schedulable node whose NoSchedule/NoExecute taints it tolerates, whose
//! `nodeSelector` labels match and whose extended resources (GPUs, NPUs) and
//! pod slots still fit, preferring the node with the fewest pods (spreading).
//!
//! It binds through the `pods/binding` subresource, as kube-scheduler does;
//! if the server answers that subresource with 404/405 it falls back, once
//! and for good, to a merge patch of `spec.nodeName`.
//!
//! Its throughput can be limited ([`SchedulerConfig::rate`]): kube-scheduler
//! binds each pod with one request through a client limited to 50 requests
//! a second (burst 100) by default, which is what recreating a large job
//! waits for (see [`super::kubelet::costs`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::runtime::{Writer, next_batch, ticks, watch_stream};
use super::util::{is_not_found, is_status, key};

mod bucket;
mod fit;
mod gang;
mod state;

use fit::{fits, node_view, pod_requests};
pub use gang::GangConfig;
use gang::Gangs;

/// What the scheduler keeps of a node.
#[derive(Debug, Clone, Default)]
struct NodeView {
    ready: bool,
    unschedulable: bool,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    /// Extended resources (`nvidia.com/gpu`, ...) and `pods`, allocatable.
    allocatable: HashMap<String, i64>,
    used: HashMap<String, i64>,
}

/// What the scheduler keeps of a pod that waits for a node.
#[derive(Debug, Clone)]
struct PendingPod {
    ns: String,
    name: String,
    requests: HashMap<String, i64>,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    /// `namespace/group` of a Volcano pod's gang (see [`gang`]).
    group: Option<String>,
}

/// A pod that holds resources on a node.
#[derive(Debug, Clone)]
struct BoundPod {
    node: String,
    requests: HashMap<String, i64>,
    /// Its gang, as for [`PendingPod::group`].
    group: Option<String>,
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Node(Event<Node>),
    Pod(Event<Pod>),
    Bound(String, String, Result<(), kube::Error>),
    /// A gang's minimum was read: (`namespace/group`, minimum).
    Gang(String, i64),
    Tick,
    /// The bind rate allows the next bind.
    Wake,
}

/// How the scheduler runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulerConfig {
    /// `None`: every pod and node (the embedded cluster).
    pub scope: Option<Scope>,
    /// Binds per second; 0 for no limit.
    pub rate: f64,
    /// Binds allowed at once before the rate applies (at least 1).
    pub burst: u32,
    /// `Some`: Volcano's pods (those naming a PodGroup) are placed as
    /// vc-scheduler does, in gangs, per session, through its own client
    /// ([`GangConfig`]); `None`: like every other pod.
    pub gang: Option<GangConfig>,
}

/// A token bucket: `rate` binds a second, at most `burst` at once.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

/// What the scheduler serves on a shared cluster: only pods that ask for it
/// by `spec.schedulerName`, only on the simulated nodes, so it never races
/// the real kube-scheduler nor places pods on real nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The `spec.schedulerName` served.
    pub scheduler_name: String,
    /// Nodes whose names start with this are the simulated ones.
    pub node_prefix: String,
}

struct State {
    /// `None`: every pod and node (the embedded cluster).
    scope: Option<Scope>,
    nodes: HashMap<String, NodeView>,
    /// Nodes by (pods placed, name): the least loaded first, so choosing a
    /// node usually looks at one node, not all 2,000.
    order: BTreeSet<(i64, String)>,
    pending: HashMap<String, PendingPod>,
    bound: HashMap<String, BoundPod>,
    in_flight: HashMap<String, PendingPod>,
    /// Pods that fit nowhere at their last try: retried on node changes and
    /// ticks only, so they do not cost a scan of all nodes per event.
    parked: HashSet<String>,
}

/// Runs the scheduler until the task is aborted.
pub async fn run(client: Client) {
    run_scoped(client, None).await;
}

/// Runs the scheduler limited to `scope` (`None`: every pod and node)
/// until the task is aborted.
pub async fn run_scoped(client: Client, scope: Option<Scope>) {
    run_with(
        client,
        SchedulerConfig {
            scope,
            ..SchedulerConfig::default()
        },
    )
    .await;
}

/// Runs the scheduler with `cfg` until the task is aborted.
pub async fn run_with(client: Client, cfg: SchedulerConfig) {
    let scope = cfg.scope.clone();
    let mut bucket = Bucket::new(cfg.rate, cfg.burst, Instant::now());
    let (wake_tx, mut wake_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let wakes = futures::stream::poll_fn(move |cx| wake_rx.poll_recv(cx));
    let mut wake_pending = false;
    let pods: Api<Pod> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let (writer, results) = Writer::new(64);
    let mut input = futures::stream::select_all(vec![
        watch_stream(nodes, None, "scheduler nodes")
            .map(Input::Node)
            .boxed(),
        watch_stream(pods.clone(), None, "scheduler pods")
            .map(Input::Pod)
            .boxed(),
        results.boxed(),
        ticks(Duration::from_millis(500))
            .map(|_| Input::Tick)
            .boxed(),
        wakes.map(|_| Input::Wake).boxed(),
    ]);
    let use_patch = Arc::new(AtomicBool::new(false));
    let mut gangs = cfg.gang.clone().map(|g| Gangs::new(g, Instant::now()));
    let mut session_wake: Option<Instant> = None;
    let mut st = State::new(scope);
    let mut pod_snapshot: Option<HashSet<String>> = None;
    while let Some(batch) = next_batch(&mut input, 2048).await {
        let mut unpark = false;
        for ev in batch {
            match ev {
                Input::Node(Event::Apply(n)) | Input::Node(Event::InitApply(n)) => {
                    st.on_node(&n);
                    unpark = true;
                }
                Input::Node(Event::Delete(n)) => st.remove_node(&n.name_any()),
                Input::Node(_) => {}
                Input::Pod(Event::Init) => pod_snapshot = Some(HashSet::new()),
                Input::Pod(Event::InitApply(p)) => {
                    if let Some(s) = pod_snapshot.as_mut() {
                        s.insert(key(&p.namespace().unwrap_or_default(), &p.name_any()));
                    }
                    st.on_pod(&p);
                    ask_gang_min(&mut gangs, &p, &client, &writer);
                }
                Input::Pod(Event::InitDone) => {
                    if let Some(seen) = pod_snapshot.take() {
                        let gone: Vec<String> = st
                            .pending
                            .keys()
                            .chain(st.bound.keys())
                            .filter(|k| !seen.contains(*k))
                            .cloned()
                            .collect();
                        for k in gone {
                            st.forget(&k);
                        }
                    }
                }
                Input::Pod(Event::Apply(p)) => {
                    st.on_pod(&p);
                    ask_gang_min(&mut gangs, &p, &client, &writer);
                }
                Input::Gang(g, min) => {
                    if let Some(gs) = gangs.as_mut() {
                        gs.set_min(g, min);
                    }
                }
                Input::Pod(Event::Delete(p)) => {
                    st.forget(&key(&p.namespace().unwrap_or_default(), &p.name_any()))
                }
                Input::Bound(k, node, res) => {
                    let pod = st.in_flight.remove(&k);
                    if let Err(e) = res {
                        // Undo the optimistic charge; the pod is retried
                        // unless it is gone.
                        if let Some(b) = st.bound.remove(&k) {
                            st.charge(&b.node, &b.requests, -1);
                        }
                        if !is_not_found(&e) {
                            tracing::debug!(pod = %k, node = %node, error = %e, "bind failed");
                            if let Some(pod) = pod {
                                st.pending.insert(k, pod);
                            }
                        }
                    }
                }
                Input::Tick => unpark = true,
                Input::Wake => wake_pending = false,
            }
        }
        if unpark {
            st.parked.clear();
        }
        let now = Instant::now();
        if let Some(gs) = gangs.as_mut() {
            let next = gs.session(now, &st.pending, &st.bound);
            // Gang pods wait for the next session: wake for it.
            let waiting = st
                .pending
                .values()
                .any(|p| p.group.as_deref().is_some_and(|g| !gs.admitted(g)));
            if waiting && session_wake.is_none_or(|w| w <= now) {
                session_wake = Some(next);
                let tx = wake_tx.clone();
                let d = next.saturating_duration_since(now);
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = tx.send(());
                });
            }
        }
        let todo: Vec<String> = st
            .pending
            .keys()
            .filter(|k| !st.in_flight.contains_key(*k) && !st.parked.contains(*k))
            .cloned()
            .collect();
        let mut gang_throttled = false;
        for k in todo {
            let Some(pod) = st.pending.get(&k).cloned() else {
                continue;
            };
            let gang = match (&pod.group, gangs.as_ref()) {
                (Some(g), Some(gs)) => {
                    if gang_throttled || !gs.admitted(g) {
                        continue;
                    }
                    true
                }
                _ => false,
            };
            let Some(node) = st.choose(&pod) else {
                st.parked.insert(k);
                continue;
            };
            if gang {
                let Some(gs) = gangs.as_mut() else { continue };
                if !gs.take(Instant::now()) {
                    gang_throttled = true;
                    if !wake_pending {
                        wake_pending = true;
                        let tx = wake_tx.clone();
                        let d = gs.wait();
                        tokio::spawn(async move {
                            tokio::time::sleep(d).await;
                            let _ = tx.send(());
                        });
                    }
                    continue;
                }
            } else if !bucket.take(Instant::now()) {
                // Throttled: the rest waits for the next token.
                if !wake_pending {
                    wake_pending = true;
                    let tx = wake_tx.clone();
                    let d = bucket.wait();
                    tokio::spawn(async move {
                        tokio::time::sleep(d).await;
                        let _ = tx.send(());
                    });
                }
                if gangs.is_none() {
                    break;
                }
                continue;
            }
            st.pending.remove(&k);
            st.charge(&node, &pod.requests, 1);
            st.bound.insert(
                k.clone(),
                BoundPod {
                    node: node.clone(),
                    requests: pod.requests.clone(),
                    group: pod.group.clone(),
                },
            );
            st.in_flight.insert(k.clone(), pod.clone());
            let api: Api<Pod> = Api::namespaced(client.clone(), &pod.ns);
            let use_patch = use_patch.clone();
            writer.spawn(async move {
                let res = bind(&api, &pod.name, &pod.ns, &node, &use_patch).await;
                Input::Bound(k, node, res)
            });
        }
    }
}

/// Asks for the gang minimum of `pod`'s gang the first time it is seen.
fn ask_gang_min(gangs: &mut Option<Gangs>, pod: &Pod, client: &Client, writer: &Writer<Input>) {
    let Some(gs) = gangs.as_mut() else { return };
    let Some((group, ns, job)) = gang::gang_of(pod) else {
        return;
    };
    if gs.needs_min(&group) {
        let client = client.clone();
        writer.spawn(async move { Input::Gang(group, gang::read_min(client, ns, job).await) });
    }
}

/// Binds one pod: `pods/binding`, or a `spec.nodeName` patch on servers
/// without that subresource.
async fn bind(
    api: &Api<Pod>,
    name: &str,
    ns: &str,
    node: &str,
    use_patch: &AtomicBool,
) -> Result<(), kube::Error> {
    if !use_patch.load(Ordering::Relaxed) {
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 404) || is_status(&e, 405) => {
                // Either the pod is gone or the subresource is missing:
                // the patch below tells which.
                let r = patch_node_name(api, name, node).await;
                if r.is_ok() {
                    tracing::info!(
                        "sim scheduler: server has no pods/binding, binding by patching spec.nodeName"
                    );
                    use_patch.store(true, Ordering::Relaxed);
                }
                return r;
            }
            Err(e) => return Err(e),
        }
    }
    patch_node_name(api, name, node).await
}

async fn patch_node_name(api: &Api<Pod>, name: &str, node: &str) -> Result<(), kube::Error> {
    let patch = json!({"spec": {"nodeName": node}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests;
