//! The kubelets of all simulated nodes, as one task (so 2,000 nodes cost one
//! watch, not 2,000). For pods bound to a Ready node they report the pod
//! `Running` with ready containers; they restart failed containers in place
//! when the pod's `restartPolicy` says so (`restartCount + 1`, the failure
//! kept in `lastState.terminated`), finish graceful deletions, and mark the
//! pods of a node that goes NotReady as not ready, as the node lifecycle
//! controller does. On Ascend nodes they also play the device plugin's
//! Allocate: a pod asking for `huawei.com/Ascend910` gets free chips and
//! the `ascend.kubectl.kubernetes.io/ascend-910-configuration` annotation
//! (one patch) before it is reported running.
//!
//! Faults are injected through [`Kubelet`]: a container terminates with an
//! exit code and reason, a node gets a condition or goes NotReady.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::ascend;
use super::runtime::{ActorError, Writer, next_batch, ticks, watch_stream};
use super::util::{
    container_id, is_conflict, is_not_found, key, now_rfc3339, set_condition, str_at,
};

/// How the kubelets behave.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Time between a container's failure and its in-place restart (the
    /// real kubelet's CrashLoopBackOff starts at 10 s; tests want it short).
    pub restart_delay: Duration,
    /// Time between a pod being bound and it reported Running.
    pub start_delay: Duration,
    /// `Some`: run only the nodes whose names start with this (the fake
    /// nodes on a shared cluster), leaving real nodes to their kubelets.
    pub node_prefix: Option<String>,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            restart_delay: Duration::from_millis(200),
            start_delay: Duration::ZERO,
            node_prefix: None,
        }
    }
}

/// What the kubelets keep of a pod.
#[derive(Debug, Clone, Default)]
struct PodView {
    node: Option<String>,
    uid: String,
    phase: Option<String>,
    restart_policy: String,
    has_statuses: bool,
    deleting: bool,
    /// Containers waiting for an in-place restart.
    to_restart: Vec<String>,
    /// Container names and images, to report them running.
    containers: Vec<(String, String)>,
    /// Ascend chips asked for (limits of all containers).
    npus: u32,
    /// Already carries the device plugin's annotation.
    annotated: bool,
}

fn pod_view(pod: &Pod) -> PodView {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let restart_policy = spec
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".into());
    let phase = status.and_then(|s| s.phase.clone());
    let mut to_restart = Vec::new();
    if phase.as_deref() == Some("Running") {
        for cs in status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
        {
            if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref()) {
                let restart = match restart_policy.as_str() {
                    "Always" => true,
                    "OnFailure" => t.exit_code != 0,
                    _ => false,
                };
                if restart {
                    to_restart.push(cs.name.clone());
                }
            }
        }
    }
    PodView {
        node: spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        uid: pod.uid().unwrap_or_default(),
        phase,
        restart_policy,
        has_statuses: status
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| !c.is_empty()),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        to_restart,
        containers: spec
            .map(|s| {
                s.containers
                    .iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default(),
        npus: spec
            .map(|s| {
                s.containers
                    .iter()
                    .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(ascend::RESOURCE))
                    .filter_map(|q| q.0.parse::<u32>().ok())
                    .sum()
            })
            .unwrap_or(0),
        annotated: pod.annotations().contains_key(ascend::DEVICE_ANNOTATION),
    }
}

#[derive(Debug, Clone, Default)]
struct NodeView {
    ready: bool,
    ip: String,
    /// Ascend chips of the node (0: not an Ascend node).
    npus: u32,
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Node(Event<Node>),
    Pod(Event<Pod>),
    Done(String),
    Tick,
}

static POD_IP: AtomicU32 = AtomicU32::new(0);

/// A pod IP from 10.244.0.0/14, unique within the process.
fn next_pod_ip() -> String {
    let n = POD_IP.fetch_add(1, Ordering::Relaxed);
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 2)) + n).to_string()
}

/// The status a kubelet reports once all containers of a pod run.
fn running_status(containers: &[(String, String)], host_ip: &str) -> Value {
    let now = now_rfc3339();
    let ip = next_pod_ip();
    let containers: Vec<Value> = containers
        .iter()
        .map(|(name, image)| {
            json!({
                "name": name,
                "image": image,
                "imageID": format!("{image}@sha256:{:016x}", super::util::rand_u64()),
                "containerID": container_id(),
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
                "lastState": {},
            })
        })
        .collect();
    let mut conds = Vec::new();
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        conds.push(
            json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now}),
        );
    }
    json!({
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": conds,
        "containerStatuses": containers,
    })
}

/// Recomputes `phase` and the readiness conditions from the container
/// statuses, with the kubelet's rules for the pod's restart policy.
fn settle(status: &mut Value, restart_policy: &str) {
    let statuses = status["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let terminated: Vec<i64> = statuses
        .iter()
        .filter_map(|c| c["state"]["terminated"]["exitCode"].as_i64())
        .collect();
    let all_terminated = !statuses.is_empty() && terminated.len() == statuses.len();
    let any_failed = terminated.iter().any(|c| *c != 0);
    let phase = match restart_policy {
        "Never" if all_terminated => Some(if any_failed { "Failed" } else { "Succeeded" }),
        "OnFailure" if all_terminated && !any_failed => Some("Succeeded"),
        _ => None,
    };
    if let Some(p) = phase {
        status["phase"] = json!(p);
    }
    let unready: Vec<String> = statuses
        .iter()
        .filter(|c| c["ready"] != json!(true))
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect();
    let mut conds = status["conditions"].as_array().cloned().unwrap_or_default();
    let (st, reason, msg) = if unready.is_empty() {
        ("True", "", String::new())
    } else if phase.is_some() {
        ("False", "PodCompleted", String::new())
    } else {
        (
            "False",
            "ContainersNotReady",
            format!("containers with unready status: [{}]", unready.join(" ")),
        )
    };
    for t in ["Ready", "ContainersReady"] {
        set_condition(&mut conds, t, st, reason, &msg);
    }
    for c in conds.iter_mut() {
        if let Some(o) = c.as_object_mut() {
            o.remove("lastUpdateTime");
            if o.get("reason").and_then(Value::as_str) == Some("") {
                o.remove("reason");
                o.remove("message");
            }
        }
    }
    status["conditions"] = json!(conds);
}

/// Terminates `container` in `status` (a pod status as JSON) the way the
/// kubelet reports it.
fn terminate_in(
    status: &mut Value,
    restart_policy: &str,
    container: &str,
    exit_code: i32,
    reason: &str,
) -> Result<(), ActorError> {
    let now = now_rfc3339();
    let list = status["containerStatuses"].as_array_mut().ok_or_else(|| {
        ActorError::Invalid("pod has no container statuses yet (not running)".into())
    })?;
    let cs = list
        .iter_mut()
        .find(|c| c["name"] == json!(container))
        .ok_or_else(|| ActorError::Invalid(format!("no container {container} in pod")))?;
    let started = cs["state"]["running"]["startedAt"].clone();
    let cid = cs["containerID"].clone();
    cs["state"] = json!({"terminated": {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": started,
        "finishedAt": now,
        "containerID": cid,
    }});
    cs["ready"] = json!(false);
    cs["started"] = json!(false);
    settle(status, restart_policy);
    Ok(())
}

/// Restarts a terminated container in place: the failure moves to
/// `lastState`, `restartCount` grows, a new container runs.
fn restart_in(status: &mut Value, restart_policy: &str, container: &str) -> bool {
    let now = now_rfc3339();
    let Some(list) = status["containerStatuses"].as_array_mut() else {
        return false;
    };
    let Some(cs) = list.iter_mut().find(|c| c["name"] == json!(container)) else {
        return false;
    };
    if cs["state"]["terminated"].is_null() {
        return false;
    }
    let last = cs["state"].clone();
    cs["lastState"] = last;
    cs["state"] = json!({"running": {"startedAt": now}});
    cs["restartCount"] = json!(cs["restartCount"].as_i64().unwrap_or(0) + 1);
    cs["ready"] = json!(true);
    cs["started"] = json!(true);
    cs["containerID"] = json!(container_id());
    settle(status, restart_policy);
    true
}

/// Fetches a pod, lets `edit` change its status, and writes it back with a
/// resourceVersion precondition, retrying conflicts.
async fn edit_pod_status<F>(api: &Api<Pod>, name: &str, mut edit: F) -> Result<bool, ActorError>
where
    F: FnMut(&Pod, &mut Value) -> Result<bool, ActorError>,
{
    for _ in 0..8 {
        let Some(pod) = api.get_opt(name).await? else {
            return Err(ActorError::NotFound {
                kind: "Pod",
                name: name.to_owned(),
            });
        };
        let mut status = serde_json::to_value(pod.status.clone().unwrap_or_default())?;
        if !edit(&pod, &mut status)? {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {"resourceVersion": pod.resource_version()},
            "status": status,
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ActorError::Timeout(format!(
        "pod {name}: status kept conflicting"
    )))
}

fn restart_policy_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".into())
}

/// Fault injection on pods and nodes, and the handle of the kubelet task.
#[derive(Clone)]
pub struct Kubelet {
    client: Client,
}

impl Kubelet {
    /// A handle that writes through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Terminates one container of a running pod with `exit_code` and
    /// `reason` (`Error`, `OOMKilled`, `Completed`, ...). With restartPolicy
    /// `Never` the pod becomes `Failed` (or `Succeeded`) once all its
    /// containers ended; with `OnFailure`/`Always` the kubelet task restarts
    /// the container in place shortly after, as a real kubelet does.
    pub async fn fail_container(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        exit_code: i32,
        reason: &str,
    ) -> Result<(), ActorError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        edit_pod_status(&api, pod, |p, status| {
            terminate_in(status, &restart_policy_of(p), container, exit_code, reason)?;
            Ok(true)
        })
        .await
        .map(|_| ())
    }

    /// Sets (adds or replaces by type) a node condition, as
    /// node-problem-detector or rebound's agent would.
    pub async fn set_node_condition(
        &self,
        node: &str,
        ctype: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ActorError> {
        let api: Api<Node> = Api::all(self.client.clone());
        for _ in 0..8 {
            let Some(n) = api.get_opt(node).await? else {
                return Err(ActorError::NotFound {
                    kind: "Node",
                    name: node.to_owned(),
                });
            };
            let mut conds: Vec<Value> = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(serde_json::to_value)
                .transpose()?
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            set_condition(&mut conds, ctype, status, reason, message);
            let now = now_rfc3339();
            for c in conds.iter_mut() {
                if let Some(o) = c.as_object_mut() {
                    o.remove("lastUpdateTime");
                    if str_at(&Value::Object(o.clone()), &["type"]) == Some(ctype) {
                        o.insert("lastHeartbeatTime".into(), json!(now));
                    }
                }
            }
            let patch = json!({
                "metadata": {"resourceVersion": n.resource_version()},
                "status": {"conditions": conds},
            });
            match api
                .patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ActorError::Timeout(format!(
            "node {node}: status kept conflicting"
        )))
    }

    /// Makes a node Ready or NotReady (its kubelet stopped posting status).
    /// A NotReady node gets no new pods; its pods are marked not ready.
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), ActorError> {
        if ready {
            self.set_node_condition(
                node,
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            )
            .await
        } else {
            self.set_node_condition(
                node,
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
            .await
        }
    }
}

/// How long a node Lease is valid, as the kubelet's default
/// (`nodeLeaseDurationSeconds`).
const LEASE_SECONDS: i32 = 40;

/// Renews the node Leases (`kube-node-lease/<node>`) of `nodes` every 10 s
/// until the task is aborted, as each real kubelet does: without them a
/// real cluster's node lifecycle controller marks the nodes `Unknown` after
/// its grace period, taints them `unreachable:NoExecute` and evicts their
/// pods. Only the Lease is renewed, never the `Ready` condition, so a test
/// that marks a node NotReady keeps it so.
pub async fn renew_leases(client: Client, nodes: Vec<String>) {
    use k8s_openapi::api::coordination::v1::Lease;
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    if let Err(e) = super::super::cluster::ensure_namespace(&client, "kube-node-lease").await {
        tracing::warn!(error = %e, "node lease namespace");
    }
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    loop {
        tick.tick().await;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        for node in &nodes {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
            });
            let pp = PatchParams::apply("rebound-sim-kubelet").force();
            if let Err(e) = api.patch(node, &pp, &Patch::Apply(&lease)).await {
                tracing::debug!(node = %node, error = %e, "renew node lease");
            }
        }
    }
}

/// Runs the kubelets of all nodes until the task is aborted.
pub async fn run(client: Client, cfg: KubeletConfig) {
    let pods: Api<Pod> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let (writer, results) = Writer::new(64);
    let mut input = futures::stream::select_all(vec![
        watch_stream(nodes, None, "kubelet nodes")
            .map(Input::Node)
            .boxed(),
        watch_stream(pods, None, "kubelet pods")
            .map(Input::Pod)
            .boxed(),
        results.boxed(),
        ticks(Duration::from_secs(1)).map(|_| Input::Tick).boxed(),
    ]);
    let mut nodes: HashMap<String, NodeView> = HashMap::new();
    let mut pods: HashMap<String, PodView> = HashMap::new();
    let mut by_node: HashMap<String, HashSet<String>> = HashMap::new();
    let mut in_flight: HashSet<String> = HashSet::new();
    // Pods (by uid) reported running, until the watch shows it: a status
    // write is not repeated because the watch lags behind.
    let mut started: HashMap<String, std::time::Instant> = HashMap::new();
    let mut snapshot: Option<HashSet<String>> = None;
    // The Ascend device plugin's allocations: node -> chip -> pod key.
    let mut chips: HashMap<String, HashMap<u32, String>> = HashMap::new();
    while let Some(batch) = next_batch(&mut input, 2048).await {
        let mut dirty: HashSet<String> = HashSet::new();
        let mut went_unready: Vec<String> = Vec::new();
        for ev in batch {
            match ev {
                Input::Node(Event::Apply(n)) | Input::Node(Event::InitApply(n))
                    if cfg
                        .node_prefix
                        .as_deref()
                        .is_none_or(|p| n.name_any().starts_with(p)) =>
                {
                    let name = n.name_any();
                    let ready = n
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                        .is_some_and(|c| c.status == "True");
                    let ip = n
                        .status
                        .as_ref()
                        .and_then(|s| s.addresses.as_ref())
                        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
                        .map(|a| a.address.clone())
                        .unwrap_or_else(|| "10.0.0.1".into());
                    let npus = n
                        .status
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .and_then(|c| c.get(ascend::RESOURCE))
                        .and_then(|q| q.0.parse::<u32>().ok())
                        .unwrap_or(0);
                    let was = nodes.insert(name.clone(), NodeView { ready, ip, npus });
                    let was_ready = was.is_some_and(|w| w.ready);
                    if ready && !was_ready {
                        dirty.extend(by_node.get(&name).into_iter().flatten().cloned());
                    }
                    if !ready && was_ready {
                        went_unready.push(name);
                    }
                }
                Input::Node(Event::Delete(n)) => {
                    nodes.remove(&n.name_any());
                }
                Input::Node(_) => {}
                Input::Pod(Event::Init) => snapshot = Some(HashSet::new()),
                Input::Pod(Event::InitDone) => {
                    if let Some(seen) = snapshot.take() {
                        for set in chips.values_mut() {
                            set.retain(|_, k| seen.contains(k));
                        }
                        pods.retain(|k, v| {
                            let keep = seen.contains(k);
                            if !keep
                                && let Some(n) = &v.node
                                && let Some(set) = by_node.get_mut(n)
                            {
                                set.remove(k);
                            }
                            keep
                        });
                    }
                }
                Input::Pod(Event::Apply(p)) | Input::Pod(Event::InitApply(p)) => {
                    let k = key(&p.namespace().unwrap_or_default(), &p.name_any());
                    if let Some(s) = snapshot.as_mut() {
                        s.insert(k.clone());
                    }
                    let view = pod_view(&p);
                    if view.has_statuses {
                        started.remove(&view.uid);
                    }
                    if let Some(n) = &view.node {
                        by_node.entry(n.clone()).or_default().insert(k.clone());
                    }
                    pods.insert(k.clone(), view);
                    dirty.insert(k);
                }
                Input::Pod(Event::Delete(p)) => {
                    let k = key(&p.namespace().unwrap_or_default(), &p.name_any());
                    if let Some(v) = pods.remove(&k) {
                        started.remove(&v.uid);
                        if let Some(n) = &v.node
                            && let Some(set) = chips.get_mut(n)
                        {
                            set.retain(|_, p| p != &k);
                        }
                        if let Some(n) = v.node
                            && let Some(set) = by_node.get_mut(&n)
                        {
                            set.remove(&k);
                        }
                    }
                }
                Input::Done(k) => {
                    in_flight.remove(&k);
                    dirty.insert(k);
                }
                Input::Tick => {}
            }
        }
        for node in went_unready {
            for k in by_node.get(&node).into_iter().flatten() {
                let Some((ns, name)) = k.split_once('/') else {
                    continue;
                };
                let api: Api<Pod> = Api::namespaced(client.clone(), ns);
                let name = name.to_owned();
                let k2 = format!("{k}#unready");
                writer.spawn(async move {
                    let r = edit_pod_status(&api, &name, |_, st| {
                        let mut conds = st["conditions"].as_array().cloned().unwrap_or_default();
                        let changed =
                            set_condition(&mut conds, "Ready", "False", "NodeNotReady", "");
                        for c in conds.iter_mut() {
                            if let Some(o) = c.as_object_mut() {
                                o.remove("lastUpdateTime");
                            }
                        }
                        st["conditions"] = json!(conds);
                        Ok(changed)
                    })
                    .await;
                    if let Err(e) = r {
                        tracing::debug!(pod = %name, error = %e, "mark pod not ready");
                    }
                    Input::Done(k2)
                });
            }
        }
        for k in dirty {
            if in_flight.contains(&k) {
                continue;
            }
            let Some(view) = pods.get(&k) else { continue };
            let Some(node) = view.node.as_ref().and_then(|n| nodes.get(n)) else {
                continue;
            };
            if !node.ready {
                continue;
            }
            let Some((ns, name)) = k.split_once('/') else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            let name = name.to_owned();
            let k2 = k.clone();
            if view.deleting {
                // Graceful deletion: the kubelet stopped the containers, now
                // the object goes.
                let uid = view.uid.clone();
                in_flight.insert(k.clone());
                writer.spawn(async move {
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: Some(uid),
                            resource_version: None,
                        }),
                        ..Default::default()
                    };
                    if let Err(e) = api.delete(&name, &dp).await
                        && !is_not_found(&e)
                        && !is_conflict(&e)
                    {
                        tracing::debug!(pod = %name, error = %e, "finish pod deletion");
                    }
                    Input::Done(k2)
                });
                continue;
            }
            let terminal = matches!(view.phase.as_deref(), Some("Succeeded") | Some("Failed"));
            if terminal {
                continue;
            }
            if !view.has_statuses {
                if started
                    .get(&view.uid)
                    .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
                {
                    continue;
                }
                started.insert(view.uid.clone(), std::time::Instant::now());
                // Built from the watched pod: one PATCH, no GET.
                let status = running_status(&view.containers, &node.ip);
                let delay = cfg.start_delay;
                // The device plugin's Allocate: chips for the pod, written
                // in its annotation before the containers start.
                let mut device = None;
                if view.npus > 0 && node.npus > 0 && !view.annotated {
                    let node_name = view.node.clone().unwrap_or_default();
                    let taken = chips.entry(node_name).or_default();
                    taken.retain(|_, p| p != &k);
                    let used: Vec<u32> = taken.keys().copied().collect();
                    match ascend::pick_chips(node.npus, &used, view.npus) {
                        Some(picked) => {
                            for c in &picked {
                                taken.insert(*c, k.clone());
                            }
                            device = Some(ascend::device_annotation(&name, &node.ip, &picked));
                        }
                        None => {
                            tracing::debug!(pod = %name, "not enough free Ascend chips for the annotation");
                        }
                    }
                }
                in_flight.insert(k.clone());
                writer.spawn(async move {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if let Some(d) = device {
                        let patch =
                            json!({"metadata": {"annotations": {ascend::DEVICE_ANNOTATION: d}}});
                        if let Err(e) = api
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                        {
                            tracing::debug!(pod = %name, error = %e, "device plugin annotation");
                        }
                    }
                    let patch = json!({"status": status});
                    if let Err(e) = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        && !is_not_found(&e)
                    {
                        tracing::debug!(pod = %name, error = %e, "start pod");
                    }
                    Input::Done(k2)
                });
            } else if !view.to_restart.is_empty() {
                let containers = view.to_restart.clone();
                let policy = view.restart_policy.clone();
                let delay = cfg.restart_delay;
                in_flight.insert(k.clone());
                writer.spawn(async move {
                    tokio::time::sleep(delay).await;
                    let r = edit_pod_status(&api, &name, |_, st| {
                        let mut any = false;
                        for c in &containers {
                            any |= restart_in(st, &policy, c);
                        }
                        Ok(any)
                    })
                    .await;
                    if let Err(e) = r
                        && !matches!(e, ActorError::NotFound { .. })
                    {
                        tracing::debug!(pod = %name, error = %e, "restart container");
                    }
                    Input::Done(k2)
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Value {
        json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "containerID": "x",
                 "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "lastState": {}},
                {"name": "b", "ready": true, "restartCount": 0, "containerID": "y",
                 "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "lastState": {}},
            ],
        })
    }

    #[test]
    fn never_fails_the_pod_only_when_all_containers_ended() {
        let mut st = running();
        terminate_in(&mut st, "Never", "a", 137, "OOMKilled").expect("terminate");
        assert_eq!(st["phase"], "Running");
        assert_eq!(
            st["containerStatuses"][0]["state"]["terminated"]["reason"],
            "OOMKilled"
        );
        assert_eq!(st["conditions"][0]["status"], "False");
        terminate_in(&mut st, "Never", "b", 0, "Completed").expect("terminate");
        assert_eq!(st["phase"], "Failed");
    }

    #[test]
    fn restart_in_place_keeps_the_failure_in_last_state() {
        let mut st = running();
        terminate_in(&mut st, "OnFailure", "a", 1, "Error").expect("terminate");
        assert_eq!(st["phase"], "Running");
        assert!(restart_in(&mut st, "OnFailure", "a"));
        let cs = &st["containerStatuses"][0];
        assert_eq!(cs["restartCount"], 1);
        assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1);
        assert!(cs["state"]["running"]["startedAt"].is_string());
        assert_eq!(st["conditions"][0]["status"], "True");
        assert!(!restart_in(&mut st, "OnFailure", "a"), "already running");
    }

    #[test]
    fn unknown_container_is_an_error() {
        let mut st = running();
        assert!(terminate_in(&mut st, "Never", "zzz", 1, "Error").is_err());
    }
}
