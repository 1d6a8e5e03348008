//! What a client can measure on any cluster: when the effect of an action
//! reaches it through a watch. A restart shows as the first pod of the job
//! getting a `deletionTimestamp` (or vanishing); a cordon as the node
//! turning `spec.unschedulable`. Used where the server keeps no log we can
//! read (`rebound sim --kubeconfig`), and shown beside the server-side
//! figures elsewhere, so the two can be compared.
//!
//! The watches run on a thread of their own, with their own client, and
//! start at the current resourceVersion (no initial list of
//! 20,000 pods) and resume from the last one seen if the stream ends.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;

use super::analyse::Subject;
use crate::actors::kubeflow::JOB_NAME_LABEL;

/// Effects seen, with when they reached this process.
type Seen = Arc<Mutex<Vec<(SystemTime, Subject)>>>;

/// How one of the watches fared: what a report says when the client clock
/// saw fewer effects than the server's log shows.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WatchHealth {
    /// Watch requests started (the first, and every resumption).
    pub starts: u64,
    /// Watch requests that failed to start.
    pub refused: u64,
    /// Events received (bookmarks included).
    pub events: u64,
    /// The last error: a failed start, an error event or a broken stream.
    pub last_error: Option<String>,
}

impl std::fmt::Display for WatchHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} watches started ({} refused), {} events",
            self.starts, self.refused, self.events
        )?;
        if let Some(e) = &self.last_error {
            write!(f, ", last error: {e}")?;
        }
        Ok(())
    }
}

type Health = Arc<Mutex<WatchHealth>>;

fn note(h: &Health, f: impl FnOnce(&mut WatchHealth)) {
    if let Ok(mut h) = h.lock() {
        f(&mut h);
    }
}

/// The running watches, on a thread and runtime of their own so that the
/// simulated actors' bursts in this process do not delay reading them (a
/// separate client would not see those); dropping it stops them.
#[derive(Debug)]
pub struct EffectWatch {
    seen: Seen,
    pods: Health,
    nodes: Health,
    _thread: WatchThread,
}

/// A thread running watches until told to stop: stopped and joined when
/// dropped, so a report never reads what a watch is still writing.
#[derive(Debug)]
pub(super) struct WatchThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchThread {
    /// The thread and the sender that stops it.
    pub(super) fn new(
        stop: tokio::sync::oneshot::Sender<()>,
        thread: std::thread::JoinHandle<()>,
    ) -> WatchThread {
        WatchThread {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for WatchThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why the watches of a measurement thread (effects, the resume
/// tracker's pods) could not start.
#[derive(Debug, thiserror::Error)]
pub enum EffectWatchError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The client could not be made, or the first requests failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The thread or its runtime could not start.
    #[error("watch thread: {0}")]
    Thread(#[from] std::io::Error),
}

impl EffectWatch {
    /// Watches, as the user of `kubeconfig`, the pods of namespace `ns` and
    /// the nodes whose names start with `node_prefix`, from now on.
    pub async fn start(
        kubeconfig: &Path,
        ns: &str,
        node_prefix: &str,
    ) -> Result<EffectWatch, EffectWatchError> {
        let seen: Seen = Arc::default();
        let (pods, nodes): (Health, Health) = Default::default();
        let health = (pods.clone(), nodes.clone());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (path, ns, prefix, s) = (
            kubeconfig.to_owned(),
            ns.to_owned(),
            node_prefix.to_owned(),
            seen.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("sim-effect-watch".into())
            .spawn(move || {
                rt.block_on(async move {
                    match start_watches(&path, &ns, &prefix, s, health).await {
                        Ok(tasks) => {
                            let _ = ready_tx.send(Ok(()));
                            let _ = stop_rx.await;
                            for t in tasks {
                                t.abort();
                            }
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })?;
        let started = ready_rx.await.unwrap_or_else(|_| {
            Err(EffectWatchError::Thread(std::io::Error::other(
                "the effect watch thread ended early",
            )))
        });
        let watch = EffectWatch {
            seen,
            pods,
            nodes,
            _thread: WatchThread::new(stop_tx, thread),
        };
        started.map(|()| watch)
    }

    /// How the pod and the node watch fared so far.
    pub fn health(&self) -> (WatchHealth, WatchHealth) {
        let read = |h: &Health| h.lock().map(|h| h.clone()).unwrap_or_default();
        (read(&self.pods), read(&self.nodes))
    }

    /// Every effect seen so far, in the order seen.
    pub fn effects(&self) -> Vec<(SystemTime, Subject)> {
        self.seen.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// On the watch thread: a client of its own, and the two watches.
async fn start_watches(
    kubeconfig: &Path,
    ns: &str,
    node_prefix: &str,
    seen: Seen,
    (pod_health, node_health): (Health, Health),
) -> Result<Vec<JoinHandle<()>>, EffectWatchError> {
    let client = Client::try_from(config_of(kubeconfig).await?)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let nodes: Api<Node> = Api::all(client);
    let pods_rv = current_rv(&pods).await?;
    let nodes_rv = current_rv(&nodes).await?;
    let mut pod_state = PodEffects::default();
    let s = seen.clone();
    let pod_task = tokio::spawn(watch_from(pods, pods_rv, pod_health, move |ev| {
        if let Some(e) = pod_state.on_event(ev) {
            push(&s, e);
        }
    }));
    let mut node_state = NodeEffects::new(node_prefix);
    let node_task = tokio::spawn(watch_from(nodes, nodes_rv, node_health, move |ev| {
        if let Some(e) = node_state.on_event(ev) {
            push(&seen, e);
        }
    }));
    Ok(vec![pod_task, node_task])
}

/// The client configuration `kubeconfig` names, for a measurement
/// thread's own client.
pub(super) async fn config_of(kubeconfig: &Path) -> Result<kube::Config, EffectWatchError> {
    let bad = |message: String| EffectWatchError::Kubeconfig {
        path: kubeconfig.to_owned(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| bad(e.to_string()))
}

fn push(seen: &Seen, subject: Subject) {
    if let Ok(mut v) = seen.lock() {
        v.push((SystemTime::now(), subject));
    }
}

/// The resourceVersion of a list of one item: the collection's current
/// version, to watch from.
async fn current_rv<K>(api: &Api<K>) -> Result<String, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let l = api.list_metadata(&ListParams::default().limit(1)).await?;
    Ok(l.metadata.resource_version.unwrap_or_default())
}

/// Watches `api` from `rv` until aborted, handing each event to `on`;
/// resumes from the last version seen when the stream ends or fails.
async fn watch_from<K>(
    api: Api<K>,
    mut rv: String,
    health: Health,
    mut on: impl FnMut(&WatchEvent<K>) + Send,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let wp = WatchParams::default().timeout(290);
    loop {
        note(&health, |h| h.starts += 1);
        match api.watch(&wp, &rv).await {
            Ok(stream) => {
                let mut stream = stream.boxed();
                loop {
                    let ev = match stream.try_next().await {
                        Ok(Some(ev)) => ev,
                        Ok(None) => break,
                        Err(e) => {
                            note(&health, |h| h.last_error = Some(format!("stream: {e}")));
                            break;
                        }
                    };
                    note(&health, |h| h.events += 1);
                    match &ev {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                            if let Some(v) = o.resource_version() {
                                rv = v;
                            }
                        }
                        WatchEvent::Bookmark(b) => rv = b.metadata.resource_version.clone(),
                        WatchEvent::Error(e) => {
                            tracing::debug!(error = %e.message, "sim effect watch error");
                            let why = format!("error event {}: {}", e.code, e.message);
                            note(&health, |h| h.last_error = Some(why));
                            // Expired: the version cannot be resumed from;
                            // go on from the collection's current one (the
                            // effects in between are lost, and the report
                            // says how the watch fared).
                            if e.code == 410
                                && let Ok(now) = current_rv(&api).await
                            {
                                rv = now;
                            }
                            break;
                        }
                    }
                    on(&ev);
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "sim effect watch");
                note(&health, |h| {
                    h.refused += 1;
                    h.last_error = Some(format!("start: {e}"));
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Turns pod events into restart effects: the first time a pod (by uid)
/// is seen deleting or deleted, its job was acted on.
#[derive(Debug, Default)]
struct PodEffects {
    deleting: HashSet<String>,
}

impl PodEffects {
    fn on_event(&mut self, ev: &WatchEvent<Pod>) -> Option<Subject> {
        let (pod, gone) = match ev {
            WatchEvent::Modified(p) => (p, false),
            WatchEvent::Deleted(p) => (p, true),
            _ => return None,
        };
        if !gone && pod.metadata.deletion_timestamp.is_none() {
            return None;
        }
        let uid = pod.uid().unwrap_or_default();
        if !self.deleting.insert(uid) {
            return None;
        }
        let job = pod.labels().get(JOB_NAME_LABEL)?;
        Some(Subject::Job(job.clone()))
    }
}

/// Turns node events into cordon effects: a simulated node turning
/// unschedulable (again, after an uncordon).
#[derive(Debug)]
struct NodeEffects {
    prefix: String,
    unschedulable: HashMap<String, bool>,
}

impl NodeEffects {
    fn new(prefix: &str) -> Self {
        NodeEffects {
            prefix: prefix.to_owned(),
            unschedulable: HashMap::new(),
        }
    }

    fn on_event(&mut self, ev: &WatchEvent<Node>) -> Option<Subject> {
        let (WatchEvent::Added(n) | WatchEvent::Modified(n)) = ev else {
            return None;
        };
        let name = n.name_any();
        if !name.starts_with(&self.prefix) {
            return None;
        }
        let now = n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let before = self
            .unschedulable
            .insert(name.clone(), now)
            .unwrap_or(false);
        (now && !before).then_some(Subject::Node(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, job: &str, deleting: bool) -> Pod {
        let mut v = json!({"metadata": {"name": format!("{job}-worker-0"), "uid": uid,
            "labels": {JOB_NAME_LABEL: job}}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
        }
        serde_json::from_value(v).expect("pod")
    }

    fn node(name: &str, unschedulable: bool) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"unschedulable": unschedulable}}))
        .expect("node")
    }

    #[test]
    fn a_pod_deleting_is_one_restart_effect_of_its_job() {
        let mut p = PodEffects::default();
        assert_eq!(
            p.on_event(&WatchEvent::Modified(pod("u1", "job-1", false))),
            None
        );
        assert_eq!(
            p.on_event(&WatchEvent::Modified(pod("u1", "job-1", true))),
            Some(Subject::Job("job-1".into()))
        );
        assert_eq!(
            p.on_event(&WatchEvent::Deleted(pod("u1", "job-1", true))),
            None
        );
        assert_eq!(
            p.on_event(&WatchEvent::Deleted(pod("u2", "job-1", false))),
            Some(Subject::Job("job-1".into())),
            "deleted at once (no grace)"
        );
        assert_eq!(
            p.on_event(&WatchEvent::Added(pod("u3", "job-1", false))),
            None
        );
    }

    #[test]
    fn a_node_turning_unschedulable_is_a_cordon_effect_each_time() {
        let mut n = NodeEffects::new("rb-x-");
        assert_eq!(
            n.on_event(&WatchEvent::Modified(node("rb-x-0001", false))),
            None
        );
        assert_eq!(
            n.on_event(&WatchEvent::Modified(node("rb-x-0001", true))),
            Some(Subject::Node("rb-x-0001".into()))
        );
        assert_eq!(
            n.on_event(&WatchEvent::Modified(node("rb-x-0001", true))),
            None
        );
        assert_eq!(
            n.on_event(&WatchEvent::Modified(node("rb-x-0001", false))),
            None
        );
        assert!(
            n.on_event(&WatchEvent::Modified(node("rb-x-0001", true)))
                .is_some()
        );
        assert_eq!(
            n.on_event(&WatchEvent::Modified(node("real-node", true))),
            None
        );
    }
}
