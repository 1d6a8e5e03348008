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

mod gang;
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

impl Bucket {
    fn new(rate: f64, burst: u32, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes one bind, if the rate allows it now.
    fn take(&mut self, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until the next bind is allowed.
    fn wait(&self) -> Duration {
        if self.rate <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(((1.0 - self.tokens).max(0.0) / self.rate).max(0.001))
    }
}

/// Extended resources (names with a `/`) a pod asks for, summed over its
/// containers; limits count when requests are absent, as for GPUs.
fn pod_requests(pod: &Pod) -> HashMap<String, i64> {
    let mut out: HashMap<String, i64> = HashMap::new();
    out.insert("pods".into(), 1);
    let Some(spec) = &pod.spec else { return out };
    for c in &spec.containers {
        let Some(res) = &c.resources else { continue };
        let mut seen = HashSet::new();
        for list in [&res.requests, &res.limits].into_iter().flatten() {
            for (k, q) in list {
                if k.contains('/') && seen.insert(k.clone()) {
                    *out.entry(k.clone()).or_default() += q.0.parse::<i64>().unwrap_or(0);
                }
            }
        }
    }
    out
}

fn node_view(node: &Node) -> NodeView {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let spec = node.spec.as_ref();
    let mut allocatable = HashMap::new();
    if let Some(a) = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())) {
        for (k, q) in a {
            if k.contains('/') || k == "pods" {
                allocatable.insert(k.clone(), q.0.parse::<i64>().unwrap_or(0));
            }
        }
    }
    allocatable.entry("pods".into()).or_insert(110);
    NodeView {
        ready,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        labels: node.labels().clone(),
        taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
        allocatable,
        used: HashMap::new(),
    }
}

/// Whether `tols` tolerate `taint`, with the matching rules of the real
/// scheduler (empty key with Exists matches everything, empty effect matches
/// every effect).
fn tolerates(tols: &[Toleration], taint: &Taint) -> bool {
    tols.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        if !effect_ok {
            return false;
        }
        let op = t.operator.as_deref().unwrap_or("Equal");
        match t.key.as_deref() {
            None | Some("") => op == "Exists",
            Some(k) if k == taint.key => {
                op == "Exists"
                    || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
            _ => false,
        }
    })
}

fn fits(node: &NodeView, pod: &PendingPod) -> bool {
    if !node.ready || node.unschedulable {
        return false;
    }
    if pod
        .node_selector
        .iter()
        .any(|(k, v)| node.labels.get(k) != Some(v))
    {
        return false;
    }
    if node
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .any(|t| !tolerates(&pod.tolerations, t))
    {
        return false;
    }
    pod.requests.iter().all(|(r, n)| {
        let have = node.allocatable.get(r).copied().unwrap_or(0);
        let used = node.used.get(r).copied().unwrap_or(0);
        used + n <= have
    })
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

impl State {
    /// Nothing known yet; binds only within `scope` when given.
    fn new(scope: Option<Scope>) -> State {
        State {
            scope,
            nodes: HashMap::new(),
            order: BTreeSet::new(),
            pending: HashMap::new(),
            bound: HashMap::new(),
            in_flight: HashMap::new(),
            parked: HashSet::new(),
        }
    }

    fn charge(&mut self, node: &str, req: &HashMap<String, i64>, sign: i64) {
        if let Some(n) = self.nodes.get_mut(node) {
            let before = n.used.get("pods").copied().unwrap_or(0);
            for (r, v) in req {
                *n.used.entry(r.clone()).or_default() += sign * v;
            }
            let after = n.used.get("pods").copied().unwrap_or(0);
            if before != after {
                self.order.remove(&(before, node.to_owned()));
                self.order.insert((after, node.to_owned()));
            }
        }
    }

    fn forget(&mut self, k: &str) {
        self.pending.remove(k);
        self.parked.remove(k);
        if let Some(b) = self.bound.remove(k) {
            self.charge(&b.node, &b.requests, -1);
        }
    }

    fn on_pod(&mut self, pod: &Pod) {
        let k = key(&pod.namespace().unwrap_or_default(), &pod.name_any());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded") | Some("Failed"));
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if terminal || pod.metadata.deletion_timestamp.is_some() {
            self.forget(&k);
            return;
        }
        match node {
            Some(node) if !node.is_empty() => {
                self.pending.remove(&k);
                self.parked.remove(&k);
                if !self.bound.contains_key(&k) {
                    let requests = pod_requests(pod);
                    self.charge(&node, &requests, 1);
                    let group = gang::gang_of(pod).map(|g| g.0);
                    self.bound.insert(
                        k,
                        BoundPod {
                            node,
                            requests,
                            group,
                        },
                    );
                }
            }
            _ => {
                if self.bound.contains_key(&k) || self.in_flight.contains_key(&k) {
                    return;
                }
                let spec = pod.spec.as_ref();
                if let Some(scope) = &self.scope
                    && spec.and_then(|s| s.scheduler_name.as_deref())
                        != Some(scope.scheduler_name.as_str())
                {
                    return;
                }
                self.pending.insert(
                    k,
                    PendingPod {
                        ns: pod.namespace().unwrap_or_default(),
                        name: pod.name_any(),
                        requests: pod_requests(pod),
                        node_selector: spec
                            .and_then(|s| s.node_selector.clone())
                            .unwrap_or_default(),
                        tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
                        group: gang::gang_of(pod).map(|g| g.0),
                    },
                );
            }
        }
    }

    fn on_node(&mut self, node: &Node) {
        let name = node.name_any();
        if let Some(scope) = &self.scope
            && !name.starts_with(&scope.node_prefix)
        {
            return;
        }
        let mut view = node_view(node);
        if let Some(old) = self.nodes.get(&name) {
            view.used = old.used.clone();
        }
        self.order
            .insert((view.used.get("pods").copied().unwrap_or(0), name.clone()));
        self.nodes.insert(name, view);
    }

    fn remove_node(&mut self, name: &str) {
        if let Some(n) = self.nodes.remove(name) {
            self.order
                .remove(&(n.used.get("pods").copied().unwrap_or(0), name.to_owned()));
        }
    }

    /// Picks the feasible node with the fewest pods.
    fn choose(&self, pod: &PendingPod) -> Option<String> {
        self.order
            .iter()
            .find(|(_, name)| self.nodes.get(name).is_some_and(|n| fits(n, pod)))
            .map(|(_, name)| name.clone())
    }
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
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    fn state(scope: Option<Scope>) -> State {
        State::new(scope)
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("node")
    }

    fn pod(name: &str, scheduler: Option<&str>) -> Pod {
        let mut spec = json!({"containers": [{"name": "c"}]});
        if let Some(s) = scheduler {
            spec["schedulerName"] = json!(s);
        }
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ml"}, "spec": spec}))
            .expect("pod")
    }

    #[test]
    fn a_scoped_scheduler_serves_only_its_pods_on_its_nodes() {
        let scope = Scope {
            scheduler_name: "sim".into(),
            node_prefix: "rb-x-".into(),
        };
        let mut st = state(Some(scope));
        st.on_node(&node("rb-x-0000"));
        st.on_node(&node("kind-control-plane"));
        assert_eq!(st.nodes.len(), 1, "real nodes are not the simulation's");
        st.on_pod(&pod("mine", Some("sim")));
        st.on_pod(&pod("default-scheduler", None));
        st.on_pod(&pod("other", Some("volcano")));
        assert_eq!(st.pending.keys().collect::<Vec<_>>(), vec!["ml/mine"]);
        let p = st.pending.get("ml/mine").cloned().expect("pending");
        assert_eq!(st.choose(&p).as_deref(), Some("rb-x-0000"));
        // Unscoped (the embedded cluster): every pod, every node.
        let mut all = state(None);
        all.on_node(&node("kind-control-plane"));
        all.on_pod(&pod("default-scheduler", None));
        all.on_pod(&pod("other", Some("volcano")));
        assert_eq!((all.nodes.len(), all.pending.len()), (1, 2));
    }

    #[test]
    fn tolerations_match_like_the_real_scheduler() {
        let t = taint("rebound.dev/fault", "NoSchedule");
        assert!(!tolerates(&[], &t));
        let exists_all = Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert!(tolerates(&[exists_all], &t));
        let by_key = Toleration {
            key: Some("rebound.dev/fault".into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        };
        assert!(
            !tolerates(std::slice::from_ref(&by_key), &t),
            "effect differs"
        );
    }

    #[test]
    fn the_bind_rate_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(50.0, 100, t0);
        assert_eq!((0..150).filter(|_| b.take(t0)).count(), 100, "the burst");
        assert!(b.wait() > Duration::ZERO);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            (0..150).filter(|_| b.take(t1)).count(),
            50,
            "then 50 a second"
        );
        let mut free = Bucket::new(0.0, 0, t0);
        assert!((0..10_000).all(|_| free.take(t0)), "0: no limit");
    }

    #[test]
    fn cordoned_or_tainted_nodes_do_not_fit() {
        let pod = PendingPod {
            ns: "a".into(),
            name: "p".into(),
            requests: HashMap::from([("pods".into(), 1), ("nvidia.com/gpu".into(), 8)]),
            node_selector: BTreeMap::new(),
            tolerations: vec![],
            group: None,
        };
        let mut n = NodeView {
            ready: true,
            allocatable: HashMap::from([("pods".into(), 110), ("nvidia.com/gpu".into(), 8)]),
            ..Default::default()
        };
        assert!(fits(&n, &pod));
        n.used.insert("nvidia.com/gpu".into(), 1);
        assert!(!fits(&n, &pod), "GPUs exhausted");
        n.used.clear();
        n.unschedulable = true;
        assert!(!fits(&n, &pod));
        n.unschedulable = false;
        n.taints.push(taint("x", "NoSchedule"));
        assert!(!fits(&n, &pod));
        n.taints[0].effect = "PreferNoSchedule".into();
        assert!(fits(&n, &pod));
    }
}
