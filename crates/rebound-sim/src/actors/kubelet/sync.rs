//! The kubelet task: one watch of nodes, one of pods (as JSON, so that
//! fields newer than the typed `Pod` of this build survive, such as
//! `restartPolicyRules`), a [`PodRun`] per pod on a Ready node, timers for
//! whatever is due next, and status writes.
//!
//! Writes: a pod's status is written when what the kubelet would report
//! differs from what the server holds (compared by [`fingerprint`](super::status::fingerprint)), as a
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
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::Event;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::agents::{AgentVerdict, Agents};
use super::pod::{PodRun, Timing};
use super::spec::PodSpecView;
use super::status::Transitions;
use super::{KubeletConfig, inject};
use crate::actors::ascend;
use crate::actors::runtime::{Writer, next_batch, ticks, watch_stream};
use crate::actors::util::key;

mod pods;
mod writes;

use pods::Kubelets;
use writes::{apply, spawn_delete, spawn_status};

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
