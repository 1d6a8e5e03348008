//! What pods cost on the real node, measured the way the simulated kubelet
//! models them (`PodCosts`): `pods` bare pods wired for in-place restarts
//! (each pod is its own "job": the agent follows the pod's annotations)
//! are created at once on the node, restarted in place by the two writes
//! rebound makes (the generation, then the release), and deleted. A watch
//! of the pods stamps, with this process's clock, when each step first
//! shows in a pod's status, as a controller would see it: sandbox ready
//! (`PodReadyToStartContainers`), agent running, agent started (its
//! startup probe passed), worker running, Ready; after the generation
//! write `AllContainersRestarting`, the agent running again (holding the
//! barrier); after the release the worker running again and Ready; after
//! the delete the pod gone.

use super::{REBOUND_IMAGE, RealNode};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rebound::inplace::{AGENT_CONTAINER, GENERATION_ANNOTATION, RELEASED_ANNOTATION, STATE_LABEL};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// An API request failed.
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    /// The wiring of a pod was refused.
    #[error("wiring: {0}")]
    Wire(String),
    /// A step did not happen in time.
    #[error("{what} not seen within {after:?}")]
    Timeout {
        /// The step.
        what: String,
        /// How long it was awaited.
        after: Duration,
    },
}

/// When each step was first seen for one pod (since the measurement began).
#[derive(Debug, Clone, Default)]
pub struct Steps {
    /// The pod's create request was sent.
    pub created: Option<Instant>,
    /// `PodReadyToStartContainers`: the sandbox (and network) is there.
    pub sandbox: Option<Instant>,
    /// The agent container running.
    pub agent_running: Option<Instant>,
    /// The agent's startup probe passed (`started: true`).
    pub agent_started: Option<Instant>,
    /// The worker container running.
    pub worker_running: Option<Instant>,
    /// The pod Ready.
    pub ready: Option<Instant>,
    /// The generation was written.
    pub raised: Option<Instant>,
    /// `AllContainersRestarting` True.
    pub restarting: Option<Instant>,
    /// The agent running again (restart count 1), holding the barrier.
    pub agent_again: Option<Instant>,
    /// The release was written.
    pub released: Option<Instant>,
    /// The worker running again (restart count 1).
    pub worker_again: Option<Instant>,
    /// Ready again.
    pub ready_again: Option<Instant>,
    /// The delete was sent.
    pub deleted: Option<Instant>,
    /// The pod object gone.
    pub gone: Option<Instant>,
}

/// The measured steps of every pod, by pod name.
pub type Measured = BTreeMap<String, Steps>;

fn container_running(p: &Pod, name: &str, init: bool, restarts: i32) -> Option<bool> {
    let s = p.status.as_ref()?;
    let list = if init {
        s.init_container_statuses.as_ref()
    } else {
        s.container_statuses.as_ref()
    }?;
    let c = list.iter().find(|c| c.name == name)?;
    let running = c.state.as_ref().and_then(|s| s.running.as_ref()).is_some();
    (running && c.restart_count >= restarts).then_some(c.started.unwrap_or(false))
}

fn condition(p: &Pod, t: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
}

/// Records the steps `p` shows now into `s`.
fn observe(s: &mut Steps, p: &Pod, now: Instant) {
    let set = |slot: &mut Option<Instant>, cond: bool| {
        if cond && slot.is_none() {
            *slot = Some(now);
        }
    };
    set(&mut s.sandbox, condition(p, "PodReadyToStartContainers"));
    set(
        &mut s.agent_running,
        container_running(p, AGENT_CONTAINER, true, 0).is_some(),
    );
    set(
        &mut s.agent_started,
        container_running(p, AGENT_CONTAINER, true, 0) == Some(true),
    );
    set(
        &mut s.worker_running,
        container_running(p, "worker", false, 0).is_some(),
    );
    set(&mut s.ready, s.raised.is_none() && condition(p, "Ready"));
    if s.raised.is_some() {
        set(&mut s.restarting, condition(p, "AllContainersRestarting"));
        set(
            &mut s.agent_again,
            container_running(p, AGENT_CONTAINER, true, 1).is_some(),
        );
        set(
            &mut s.worker_again,
            container_running(p, "worker", false, 1).is_some(),
        );
        set(
            &mut s.ready_again,
            s.worker_again.is_some() && condition(p, "Ready"),
        );
    }
}

/// A bare pod on `node`, wired like a job's (agent on `port`, following
/// the pod itself), its agent pointed at the API server on loopback.
fn pod(name: &str, node: &str, port: u16, api_port: u16) -> Result<Value, MeasureError> {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "m"},
        "spec": {"template": {"spec": {
            "nodeName": node, "hostNetwork": true, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "worker", "image": REBOUND_IMAGE, "command": ["/pause"]}],
        }}},
    });
    let opts = rebound::inplace::inject::InjectOptions {
        image: REBOUND_IMAGE.into(),
        probe_port: port,
        ..Default::default()
    };
    rebound::inplace::inject::inject_document(&mut job, &opts, "measure")
        .map_err(|e| MeasureError::Wire(e.to_string()))?;
    let mut spec = job["spec"]["template"]["spec"].take();
    let env = spec["initContainers"]
        .as_array_mut()
        .and_then(|a| a.iter_mut().find(|c| c["name"] == AGENT_CONTAINER))
        .and_then(|a| a["env"].as_array_mut())
        .ok_or_else(|| MeasureError::Wire("no agent environment".into()))?;
    env.retain(|e| e["name"] != "REBOUND_JOB_API" && e["name"] != "REBOUND_JOB_NAME");
    env.push(json!({"name": "REBOUND_JOB_API", "value": "v1/pods"}));
    env.push(json!({"name": "REBOUND_JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}));
    env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": api_port.to_string()}));
    Ok(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "rebound-measure"}},
        "spec": spec,
    }))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

async fn until(
    what: &str,
    within: Duration,
    seen: &Mutex<Measured>,
    done: impl Fn(&Steps) -> bool,
) -> Result<(), MeasureError> {
    let start = Instant::now();
    loop {
        if seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .all(&done)
        {
            return Ok(());
        }
        if start.elapsed() > within {
            return Err(MeasureError::Timeout {
                what: what.into(),
                after: within,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates `pods` wired pods in `ns` on `node` at once, restarts them in
/// place, deletes them, and returns when each step was seen. `ns` must
/// exist with its `default` ServiceAccount allowed to get and watch pods;
/// `api_port` is the API server's loopback port.
pub async fn measure(
    client: kube::Client,
    ns: &str,
    node: &RealNode,
    pods: usize,
    api_port: u16,
) -> Result<Measured, MeasureError> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let api: Api<Pod> = Api::namespaced(client, ns);
    let names: Vec<String> = (0..pods).map(|i| format!("m{i}")).collect();
    let seen: Arc<Mutex<Measured>> = Arc::new(Mutex::new(
        names
            .iter()
            .map(|n| (n.clone(), Steps::default()))
            .collect(),
    ));
    let lock = |m: &Mutex<Measured>| {
        m.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    };
    let s = seen.clone();
    let w = api.clone();
    let watch = tokio::spawn(async move {
        let mut events =
            watcher(w, watcher::Config::default().labels("app=rebound-measure")).boxed();
        while let Some(Ok(ev)) = events.next().await {
            let now = Instant::now();
            let mut g = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    if let Some(st) = p.metadata.name.as_ref().and_then(|n| g.get_mut(n)) {
                        observe(st, &p, now);
                    }
                }
                watcher::Event::Delete(p) => {
                    if let Some(st) = p.metadata.name.as_ref().and_then(|n| g.get_mut(n)) {
                        st.gone.get_or_insert(now);
                    }
                }
                _ => {}
            }
        }
    });
    let _stop = AbortOnDrop(watch);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let within = Duration::from_secs(60 + 5 * pods as u64);
    let mut bodies = Vec::new();
    for n in &names {
        bodies.push(pod(n, node.name(), free_port(), api_port)?);
    }
    let creates = names.iter().zip(bodies).map(|(n, body)| {
        let api = api.clone();
        let seen = seen.clone();
        async move {
            let p: Pod =
                serde_json::from_value(body).map_err(|e| MeasureError::Wire(e.to_string()))?;
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(n.clone())
                .or_default()
                .created = Some(Instant::now());
            api.create(&PostParams::default(), &p).await?;
            Ok::<(), MeasureError>(())
        }
    });
    for r in futures::future::join_all(creates).await {
        r?;
    }
    until("every pod Ready", within, &seen, |s| s.ready.is_some()).await?;
    let write = |generation: &str, rel: &str| {
        json!({"metadata": {
            "annotations": {GENERATION_ANNOTATION: generation, RELEASED_ANNOTATION: rel},
            "labels": {STATE_LABEL: format!("{generation}-{rel}")},
        }})
    };
    for n in &names {
        let now = Instant::now();
        seen.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(n.clone())
            .or_default()
            .raised = Some(now);
        api.patch(n, &PatchParams::default(), &Patch::Merge(&write("1", "0")))
            .await?;
    }
    until("every agent back at the barrier", within, &seen, |s| {
        s.agent_again.is_some()
    })
    .await?;
    for n in &names {
        seen.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(n.clone())
            .or_default()
            .released = Some(Instant::now());
        api.patch(n, &PatchParams::default(), &Patch::Merge(&write("1", "1")))
            .await?;
    }
    until("every pod Ready again", within, &seen, |s| {
        s.ready_again.is_some()
    })
    .await?;
    for n in &names {
        seen.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(n.clone())
            .or_default()
            .deleted = Some(Instant::now());
        api.delete(n, &DeleteParams::default()).await?;
    }
    until("every pod gone", within, &seen, |s| s.gone.is_some()).await?;
    Ok(lock(&seen))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One row of the report: a step's duration over the pods.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What was timed.
    pub what: &'static str,
    /// Median over the pods.
    pub median: Duration,
    /// Largest.
    pub max: Duration,
}

/// The durations `PodCosts` models, from `m`: sandbox (create → sandbox
/// ready), agent start (sandbox → agent running), probe (agent running →
/// started), worker start (agent started → worker running), kill (the
/// generation write → agent running again, the in-place restart up to the
/// barrier), release → worker running, the whole in-place restart
/// (generation write → Ready again) and stop (delete → gone).
pub fn report(m: &Measured) -> Vec<Row> {
    type Span = fn(&Steps) -> Option<Duration>;
    fn d(a: Option<Instant>, b: Option<Instant>) -> Option<Duration> {
        Some(b?.saturating_duration_since(a?))
    }
    let spans: [(&'static str, Span); 9] = [
        ("create → sandbox ready", |s| d(s.created, s.sandbox)),
        ("sandbox ready → agent running", |s| {
            d(s.sandbox, s.agent_running)
        }),
        ("agent running → started (probe)", |s| {
            d(s.agent_running, s.agent_started)
        }),
        ("agent started → worker running", |s| {
            d(s.agent_started, s.worker_running)
        }),
        ("create → Ready", |s| d(s.created, s.ready)),
        ("generation → agent running again", |s| {
            d(s.raised, s.agent_again)
        }),
        ("release → worker running again", |s| {
            d(s.released, s.worker_again)
        }),
        ("release → Ready again", |s| d(s.released, s.ready_again)),
        ("delete → gone", |s| d(s.deleted, s.gone)),
    ];
    spans
        .iter()
        .map(|(what, f)| {
            let mut v: Vec<Duration> = m.values().filter_map(f).collect();
            v.sort();
            Row {
                what,
                median: v.get(v.len() / 2).copied().unwrap_or_default(),
                max: v.last().copied().unwrap_or_default(),
            }
        })
        .collect()
}
