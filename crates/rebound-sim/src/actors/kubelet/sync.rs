//! The kubelet task: one watch of nodes, one of pods (as JSON, so that
//! fields newer than the typed `Pod` of this build survive, such as
//! `restartPolicyRules`), a [`PodRun`] per pod on a Ready node, timers for
//! whatever is due next, and status writes.
//!
//! Writes: a pod's status is written when what the kubelet would report
//! differs from what the server holds (compared by [`fingerprint`]), as a
//! merge patch with the resourceVersion the kubelet last saw as
//! precondition, so that a concurrent writer (fault injection, the node
//! lifecycle marks) is never overwritten unseen: a 409 waits for the watch
//! to bring the other write, which is then taken into account. One write
//! per pod is in flight at a time; steps that happen at the same instant
//! (all of them, with zero costs) coalesce into one write.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::agents::{AgentVerdict, Agents};
use super::pod::{Effect, PodRun, Timing};
use super::spec::{PodSpecView, parse_pod};
use super::status::{KUBELET_CONDITIONS, Transitions, fingerprint};
use super::{KubeletConfig, inject};
use crate::actors::ascend;
use crate::actors::runtime::{Writer, next_batch, ticks, watch_stream};
use crate::actors::util::{is_conflict, is_not_found, key};

#[derive(Debug, Clone, Default)]
struct NodeView {
    ready: bool,
    ip: String,
    /// Ascend chips of the node (0: not an Ascend node).
    npus: u32,
}

/// How a status write ended.
enum Wrote {
    Ok { hash: u64, rv: String },
    Conflict,
    Gone,
    Failed,
}

// One value per watch event, moved once into the loop: boxing the large
// variants would only add an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Input {
    Node(Event<Node>),
    Pod(Event<DynamicObject>),
    Agent(AgentVerdict),
    Status {
        key: String,
        uid: String,
        used_rv: u64,
        annotated: bool,
        outcome: Wrote,
    },
    /// A deletion confirmed (or failed).
    Deleted(String),
    /// Another write finished (nothing to track).
    Other,
    Tick,
}

/// The last status this kubelet wrote to a pod.
struct Sent {
    hash: u64,
    rv: u64,
    /// The fingerprint of the server's copy as the watch brought it back.
    echo: Option<u64>,
}

/// What the kubelet keeps of a pod.
struct Entry {
    uid: String,
    node: Option<String>,
    deleting: bool,
    /// The server says Succeeded or Failed (a pod this kubelet never ran).
    api_terminal: bool,
    rv: String,
    rv_n: u64,
    /// Fingerprint of the server's status.
    seen: u64,
    /// Conditions of other writers.
    foreign: Vec<PodCondition>,
    spec: PodSpecView,
    /// Ascend chips asked for (limits of all containers).
    npus: u32,
    /// Already carries the device plugin's annotation.
    annotated: bool,
    /// The device plugin's annotation to write before the containers run.
    device: Option<String>,
    run: Option<PodRun>,
    tr: Transitions,
    in_flight: bool,
    delete_in_flight: bool,
    sent: Option<Sent>,
    /// A write with this resourceVersion conflicted: wait for a newer one.
    conflicted_at: Option<u64>,
    wake: Option<Instant>,
}

fn rv_number(rv: &str) -> u64 {
    rv.parse().unwrap_or(0)
}

fn npus_of(pod: &Value) -> u32 {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["resources"]["limits"][ascend::RESOURCE].as_str())
        .filter_map(|q| q.parse::<u32>().ok())
        .sum()
}

fn node_view(n: &Node) -> NodeView {
    let status = n.status.as_ref();
    NodeView {
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True"),
        ip: status
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
            .unwrap_or_else(|| "10.0.0.1".into()),
        npus: status
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get(ascend::RESOURCE))
            .and_then(|q| q.0.parse::<u32>().ok())
            .unwrap_or(0),
    }
}

/// Exits the runtime reported: containers whose running instance shows
/// up terminated in the server's status.
fn exits(run: &PodRun, st: &PodStatus) -> Vec<(String, i32, String)> {
    st.init_container_statuses
        .iter()
        .flatten()
        .chain(st.container_statuses.iter().flatten())
        .filter_map(|cs| {
            let t = cs.state.as_ref()?.terminated.as_ref()?;
            let id = cs.container_id.as_deref()?;
            (run.running_id(&cs.name) == Some(id)).then(|| {
                (
                    cs.name.clone(),
                    t.exit_code,
                    t.reason.clone().unwrap_or_else(|| "Error".into()),
                )
            })
        })
        .collect()
}

struct Kubelets {
    client: Client,
    cfg: KubeletConfig,
    writer: Writer<Input>,
    agents: Agents,
    nodes: HashMap<String, NodeView>,
    pods: HashMap<String, Entry>,
    by_node: HashMap<String, HashSet<String>>,
    /// The Ascend device plugin's allocations: node -> chip -> pod key.
    chips: HashMap<String, HashMap<u32, String>>,
    wakeups: BTreeSet<(Instant, String)>,
}

impl Kubelets {
    fn forget(&mut self, k: &str) {
        self.agents.stop(k);
        if let Some(e) = self.pods.remove(k)
            && let Some(n) = e.node
        {
            if let Some(set) = self.by_node.get_mut(&n) {
                set.remove(k);
            }
            if let Some(set) = self.chips.get_mut(&n) {
                set.retain(|_, p| p != k);
            }
        }
    }

    /// A pod event; returns whether the pod needs a look.
    fn on_pod(&mut self, obj: DynamicObject, now: Instant) -> Option<String> {
        let ns = obj.namespace().unwrap_or_default();
        let k = key(&ns, &obj.name_any());
        let uid = obj.uid().unwrap_or_default();
        let rv = obj.resource_version().unwrap_or_default();
        let rv_n = rv_number(&rv);
        let deleting = obj.metadata.deletion_timestamp.is_some();
        let annotated = obj.annotations().contains_key(ascend::DEVICE_ANNOTATION);
        let v = serde_json::to_value(&obj).ok()?;
        let status: PodStatus = serde_json::from_value(v["status"].clone()).unwrap_or_default();
        let node = v["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        if self.pods.get(&k).is_some_and(|e| e.uid != uid) {
            // Another pod under the same name.
            self.forget(&k);
        }
        let e = self.pods.entry(k.clone()).or_insert_with(|| Entry {
            uid: uid.clone(),
            node: None,
            deleting: false,
            api_terminal: false,
            rv: String::new(),
            rv_n: 0,
            seen: 0,
            foreign: Vec::new(),
            spec: parse_pod(&v),
            npus: npus_of(&v),
            annotated: false,
            device: None,
            run: None,
            tr: Transitions::default(),
            in_flight: false,
            delete_in_flight: false,
            sent: None,
            conflicted_at: None,
            wake: None,
        });
        if rv_n != 0 && rv_n < e.rv_n {
            // Older than what a write of ours already answered.
            return None;
        }
        if e.node.is_none()
            && let Some(n) = &node
        {
            self.by_node.entry(n.clone()).or_default().insert(k.clone());
        }
        e.node = node;
        e.rv = rv;
        e.rv_n = rv_n;
        e.deleting = deleting;
        e.annotated |= annotated;
        e.api_terminal = matches!(status.phase.as_deref(), Some("Succeeded") | Some("Failed"));
        e.foreign = status
            .conditions
            .iter()
            .flatten()
            .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
            .cloned()
            .collect();
        e.seen = fingerprint(&status);
        if let Some(sent) = &mut e.sent
            && sent.rv == rv_n
        {
            sent.echo = Some(e.seen);
        }
        let t = Timing {
            costs: &self.cfg.costs,
            restart_delay: self.cfg.restart_delay,
        };
        if let Some(run) = &mut e.run {
            let mut fx = Vec::new();
            for (name, code, reason) in exits(run, &status) {
                run.exited(&name, code, &reason, now, t, &mut fx);
            }
            apply(
                &mut self.agents,
                &k,
                &e.uid,
                fx,
                &mut e.delete_in_flight,
                &self.writer,
                &self.client,
            );
        }
        Some(k)
    }

    /// Looks at one pod: starts it, advances it, writes its status, and
    /// sets its next wake-up.
    fn sync(&mut self, k: &str, now: Instant) {
        let t = Timing {
            costs: &self.cfg.costs,
            restart_delay: self.cfg.restart_delay,
        };
        let Some(e) = self.pods.get_mut(k) else {
            return;
        };
        let Some(node) = e.node.as_ref().and_then(|n| self.nodes.get(n)) else {
            return;
        };
        if !node.ready {
            return;
        }
        if e.run.is_none() {
            if e.deleting {
                // Never ran here: nothing to stop.
                if !e.delete_in_flight {
                    e.delete_in_flight = true;
                    spawn_delete(&self.writer, &self.client, k, &e.uid);
                }
                return;
            }
            if e.api_terminal {
                return;
            }
            e.run = Some(PodRun::new(
                e.spec.clone(),
                node.ip.clone(),
                now,
                t.costs,
                self.cfg.start_delay,
            ));
            // The device plugin's Allocate: chips for the pod, written in
            // its annotation before the containers start.
            if e.npus > 0 && node.npus > 0 && !e.annotated {
                let node_name = e.node.clone().unwrap_or_default();
                let taken = self.chips.entry(node_name).or_default();
                taken.retain(|_, p| p != k);
                let used: Vec<u32> = taken.keys().copied().collect();
                match ascend::pick_chips(node.npus, &used, e.npus) {
                    Some(picked) => {
                        for c in &picked {
                            taken.insert(*c, k.to_owned());
                        }
                        let name = k.split_once('/').map_or(k, |(_, n)| n);
                        e.device = Some(ascend::device_annotation(name, &node.ip, &picked));
                    }
                    None => {
                        tracing::debug!(pod = %k, "not enough free Ascend chips for the annotation");
                    }
                }
            }
        }
        let Some(run) = e.run.as_mut() else { return };
        let mut fx = Vec::new();
        if e.deleting {
            run.delete(now, t, &mut fx);
        }
        run.advance(now, t, &mut fx);
        apply(
            &mut self.agents,
            k,
            &e.uid,
            fx,
            &mut e.delete_in_flight,
            &self.writer,
            &self.client,
        );
        if !e.deleting && !e.in_flight && e.conflicted_at != Some(e.rv_n) {
            let desired = run.status(&mut e.tr, &e.foreign);
            let hash = fingerprint(&desired);
            let echoed = e
                .sent
                .as_ref()
                .is_some_and(|s| s.hash == hash && s.echo == Some(e.seen));
            if hash != e.seen && !echoed {
                e.in_flight = true;
                spawn_status(&self.writer, &self.client, k, e, &desired, hash);
            }
        }
        let due = e.run.as_ref().and_then(PodRun::next_due);
        if let Some(due) = due
            && e.wake != Some(due)
        {
            e.wake = Some(due);
            self.wakeups.insert((due, k.to_owned()));
        }
    }
}

/// Carries out a pod's effects.
fn apply(
    agents: &mut Agents,
    k: &str,
    uid: &str,
    fx: Vec<Effect>,
    delete_in_flight: &mut bool,
    writer: &Writer<Input>,
    client: &Client,
) {
    for f in fx {
        match f {
            Effect::StartAgent { run, wiring } => agents.start(k, uid, run, &wiring),
            Effect::StopAgent => agents.stop(k),
            Effect::Delete => {
                if !*delete_in_flight {
                    *delete_in_flight = true;
                    spawn_delete(writer, client, k, uid);
                }
            }
        }
    }
}

/// Graceful deletion finished: the kubelet stopped the containers, now the
/// object goes.
fn spawn_delete(writer: &Writer<Input>, client: &Client, k: &str, uid: &str) {
    let Some((ns, name)) = k.split_once('/') else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (name, uid, k) = (name.to_owned(), uid.to_owned(), k.to_owned());
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
        Input::Deleted(k)
    });
}

fn spawn_status(
    writer: &Writer<Input>,
    client: &Client,
    k: &str,
    e: &Entry,
    status: &PodStatus,
    hash: u64,
) {
    let Some((ns, name)) = k.split_once('/') else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let body = serde_json::to_value(status).unwrap_or(Value::Null);
    let device = e.device.clone().filter(|_| !e.annotated);
    let (name, k, uid, rv, used_rv) = (
        name.to_owned(),
        k.to_owned(),
        e.uid.clone(),
        e.rv.clone(),
        e.rv_n,
    );
    writer.spawn(async move {
        let mut rv = rv;
        let annotated = device.is_some();
        if let Some(d) = device {
            let patch = json!({"metadata": {"annotations": {ascend::DEVICE_ANNOTATION: d}}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(p) => rv = p.resource_version().unwrap_or(rv),
                Err(e) => tracing::debug!(pod = %name, error = %e, "device plugin annotation"),
            }
        }
        let patch = json!({"metadata": {"resourceVersion": rv}, "status": body});
        let outcome = match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(p) => Wrote::Ok {
                hash,
                rv: p.resource_version().unwrap_or_default(),
            },
            Err(e) if is_conflict(&e) => Wrote::Conflict,
            Err(e) if is_not_found(&e) => Wrote::Gone,
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "pod status");
                Wrote::Failed
            }
        };
        Input::Status {
            key: k,
            uid,
            used_rv,
            annotated,
            outcome,
        }
    });
}

/// Runs the kubelets of all nodes until the task is aborted.
pub(super) async fn run(client: Client, cfg: KubeletConfig) {
    let pods: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<Pod>(&()));
    let nodes: Api<Node> = Api::all(client.clone());
    let (writer, results) = Writer::new(64);
    let (agent_tx, agent_rx) = mpsc::unbounded_channel();
    let agent_stream = futures::stream::unfold(agent_rx, |mut rx| async move {
        rx.recv().await.map(|v| (v, rx))
    });
    let mut input = futures::stream::select_all(vec![
        watch_stream(nodes, None, "kubelet nodes")
            .map(Input::Node)
            .boxed(),
        watch_stream(pods, None, "kubelet pods")
            .map(Input::Pod)
            .boxed(),
        results.boxed(),
        agent_stream.map(Input::Agent).boxed(),
        ticks(Duration::from_secs(1)).map(|_| Input::Tick).boxed(),
    ]);
    let mut k = Kubelets {
        agents: Agents::new(client.clone(), agent_tx),
        client,
        cfg,
        writer,
        nodes: HashMap::new(),
        pods: HashMap::new(),
        by_node: HashMap::new(),
        chips: HashMap::new(),
        wakeups: BTreeSet::new(),
    };
    let mut snapshot: Option<HashSet<String>> = None;
    loop {
        let next_wake = k.wakeups.first().map(|(t, _)| *t);
        let batch = tokio::select! {
            b = next_batch(&mut input, 2048) => match b {
                Some(b) => b,
                None => return,
            },
            _ = async {
                match next_wake {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => futures::future::pending().await,
                }
            } => Vec::new(),
        };
        let now = Instant::now();
        let mut dirty: HashSet<String> = HashSet::new();
        while let Some((t, _)) = k.wakeups.first()
            && *t <= now
        {
            if let Some((t, key)) = k.wakeups.pop_first() {
                if let Some(e) = k.pods.get_mut(&key)
                    && e.wake == Some(t)
                {
                    e.wake = None;
                }
                dirty.insert(key);
            }
        }
        let mut went_unready: Vec<String> = Vec::new();
        for ev in batch {
            match ev {
                Input::Node(Event::Apply(n)) | Input::Node(Event::InitApply(n))
                    if k.cfg
                        .node_prefix
                        .as_deref()
                        .is_none_or(|p| n.name_any().starts_with(p)) =>
                {
                    let name = n.name_any();
                    let view = node_view(&n);
                    let ready = view.ready;
                    let was_ready = k.nodes.insert(name.clone(), view).is_some_and(|w| w.ready);
                    if ready && !was_ready {
                        dirty.extend(k.by_node.get(&name).into_iter().flatten().cloned());
                    }
                    if !ready && was_ready {
                        went_unready.push(name);
                    }
                }
                Input::Node(Event::Delete(n)) => {
                    k.nodes.remove(&n.name_any());
                }
                Input::Node(_) => {}
                Input::Pod(Event::Init) => snapshot = Some(HashSet::new()),
                Input::Pod(Event::InitDone) => {
                    if let Some(seen) = snapshot.take() {
                        let gone: Vec<String> = k
                            .pods
                            .keys()
                            .filter(|p| !seen.contains(*p))
                            .cloned()
                            .collect();
                        for p in gone {
                            k.forget(&p);
                        }
                    }
                }
                Input::Pod(Event::Apply(p)) | Input::Pod(Event::InitApply(p)) => {
                    if let Some(s) = snapshot.as_mut() {
                        s.insert(key(&p.namespace().unwrap_or_default(), &p.name_any()));
                    }
                    if let Some(key) = k.on_pod(p, now) {
                        dirty.insert(key);
                    }
                }
                Input::Pod(Event::Delete(p)) => {
                    k.forget(&key(&p.namespace().unwrap_or_default(), &p.name_any()));
                }
                Input::Agent(v) => {
                    let t = Timing {
                        costs: &k.cfg.costs,
                        restart_delay: k.cfg.restart_delay,
                    };
                    if let Some(e) = k.pods.get_mut(&v.pod)
                        && e.uid == v.uid
                        && let Some(run) = e.run.as_mut()
                    {
                        let mut fx = Vec::new();
                        run.agent_verdict(v.run, v.verdict, now, t, &mut fx);
                        apply(
                            &mut k.agents,
                            &v.pod,
                            &e.uid,
                            fx,
                            &mut e.delete_in_flight,
                            &k.writer,
                            &k.client,
                        );
                        dirty.insert(v.pod);
                    }
                }
                Input::Status {
                    key,
                    uid,
                    used_rv,
                    annotated,
                    outcome,
                } => {
                    let Some(e) = k.pods.get_mut(&key).filter(|e| e.uid == uid) else {
                        continue;
                    };
                    e.in_flight = false;
                    e.annotated |= annotated;
                    match outcome {
                        Wrote::Ok { hash, rv } => {
                            let n = rv_number(&rv);
                            if n >= e.rv_n {
                                e.rv = rv;
                                e.rv_n = n;
                                e.seen = hash;
                            }
                            e.sent = Some(Sent {
                                hash,
                                rv: n,
                                echo: None,
                            });
                            e.conflicted_at = None;
                        }
                        Wrote::Conflict => e.conflicted_at = Some(used_rv),
                        Wrote::Gone => {}
                        Wrote::Failed => {
                            // Try again in a second.
                            let at = now + Duration::from_secs(1);
                            e.wake = Some(at);
                            k.wakeups.insert((at, key.clone()));
                        }
                    }
                    dirty.insert(key);
                }
                Input::Deleted(key) => {
                    if let Some(e) = k.pods.get_mut(&key) {
                        e.delete_in_flight = false;
                    }
                }
                Input::Other | Input::Tick => {}
            }
        }
        for node in went_unready {
            for p in k.by_node.get(&node).into_iter().flatten() {
                let Some((ns, name)) = p.split_once('/') else {
                    continue;
                };
                let api: Api<Pod> = Api::namespaced(k.client.clone(), ns);
                let name = name.to_owned();
                k.writer.spawn(async move {
                    let r =
                        inject::edit_pod_status(&api, &name, |_, st| Ok(inject::mark_unready(st)))
                            .await;
                    if let Err(e) = r {
                        tracing::debug!(pod = %name, error = %e, "mark pod not ready");
                    }
                    Input::Other
                });
            }
        }
        for p in dirty {
            k.sync(&p, now);
        }
    }
}
