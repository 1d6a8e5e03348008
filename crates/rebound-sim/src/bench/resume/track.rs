//! The pods of one job as this process sees them through a watch, and the
//! moment the job resumed: every pod Running and Ready in the new
//! generation (a pod that was there before the fault must have restarted
//! its agent in place since; any other pod is new). The watch runs on a
//! thread, runtime and client of its own (as [`super::super::effects`]),
//! so the simulated actors' bursts in this process do not delay it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use rebound::inplace::AGENT_CONTAINER;

/// One pod as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.nodeName`, once bound.
    pub node: Option<String>,
    /// Phase `Running`.
    pub running: bool,
    /// Condition `Ready=True`.
    pub ready: bool,
    /// Has a `deletionTimestamp`.
    pub deleting: bool,
    /// The restart agent's `restartCount` (0 without an agent).
    pub agent_restarts: i32,
    /// The highest `restartCount` of the pod's regular containers.
    pub worker_restarts: i32,
}

impl PodView {
    fn of(p: &Pod) -> PodView {
        let st = p.status.as_ref();
        let agent_restarts = st
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|v| v.iter().find(|c| c.name == AGENT_CONTAINER))
            .map_or(0, |c| c.restart_count);
        PodView {
            uid: p.uid().unwrap_or_default(),
            name: p.name_any(),
            node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            running: st.and_then(|s| s.phase.as_deref()) == Some("Running"),
            ready: st
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            deleting: p.metadata.deletion_timestamp.is_some(),
            agent_restarts,
            worker_restarts: st
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|v| v.iter().map(|c| c.restart_count).max())
                .unwrap_or(0),
        }
    }

    /// Running and Ready, not being deleted.
    pub fn serving(&self) -> bool {
        self.running && self.ready && !self.deleting
    }
}

/// When the job resumed, as this process saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// When the event that completed it arrived.
    pub at: SystemTime,
    /// The pod whose change completed it (the last to be back).
    pub last_pod: String,
}

/// What "resumed" means for one recovery: as many pods as the job had,
/// each Running and Ready, and each either new or, if it was there
/// before, with its agent restarted since.
#[derive(Debug, Clone)]
struct Goal {
    pods: usize,
    /// The agent's restart count of every pod before the fault, by uid.
    before: HashMap<String, i32>,
    /// Only new pods count (a recreate: an old pod whose agent restarted
    /// it in place, as the generation rebound writes for its agents makes
    /// it, is still to be replaced by the operator).
    fresh_only: bool,
}

impl Goal {
    /// Whether `p` is back in the new generation.
    fn back(&self, p: &PodView) -> bool {
        p.serving()
            && match self.before.get(&p.uid) {
                None => true,
                Some(r) => !self.fresh_only && p.agent_restarts > *r,
            }
    }

    fn met(&self, pods: &HashMap<String, PodView>) -> bool {
        let live: Vec<&PodView> = pods.values().filter(|p| !p.deleting).collect();
        live.len() == self.pods && live.iter().all(|p| self.back(p))
    }
}

#[derive(Debug, Default)]
struct State {
    pods: HashMap<String, PodView>,
    /// A relist under way: what it has shown so far.
    relist: Option<HashMap<String, PodView>>,
    goal: Option<Goal>,
    resumed: Option<Resumed>,
    /// Since the goal was set: when each pod (by uid) was first seen back,
    /// as it was then.
    back: HashMap<String, (PodView, SystemTime)>,
}

impl State {
    /// Records when `v` was first seen back in the new generation.
    fn note_back(&mut self, v: &PodView, at: SystemTime) {
        if let Some(goal) = &self.goal
            && !v.deleting
            && goal.back(v)
            && !self.back.contains_key(&v.uid)
        {
            self.back.insert(v.uid.clone(), (v.clone(), at));
        }
    }

    fn on_event(&mut self, ev: watcher::Event<Pod>, at: SystemTime) {
        let changed = match ev {
            watcher::Event::Apply(p) => {
                let v = PodView::of(&p);
                let name = v.name.clone();
                self.note_back(&v, at);
                self.pods.insert(v.uid.clone(), v);
                Some(name)
            }
            watcher::Event::Delete(p) => {
                let uid = p.uid().unwrap_or_default();
                self.pods.remove(&uid);
                Some(p.name_any())
            }
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                None
            }
            watcher::Event::InitApply(p) => {
                let v = PodView::of(&p);
                self.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(v.uid.clone(), v);
                None
            }
            watcher::Event::InitDone => {
                self.pods = self.relist.take().unwrap_or_default();
                let now: Vec<PodView> = self.pods.values().cloned().collect();
                for v in &now {
                    self.note_back(v, at);
                }
                Some(String::new())
            }
        };
        if let (Some(name), Some(goal), None) = (changed, &self.goal, &self.resumed)
            && goal.met(&self.pods)
        {
            self.resumed = Some(Resumed { at, last_pod: name });
        }
    }
}

/// Why the watch could not start: as for the effect watch, whose thread
/// and errors it shares.
pub type TrackError = super::super::effects::EffectWatchError;

/// The running watch of one job's pods; dropping it stops it.
#[derive(Debug)]
pub struct PodTracker {
    state: Arc<Mutex<State>>,
    _thread: super::super::effects::WatchThread,
}

impl PodTracker {
    /// Watches, as the user of `kubeconfig`, the pods of namespace `ns`
    /// that match the label `selector`.
    pub async fn start(
        kubeconfig: &Path,
        ns: &str,
        selector: &str,
    ) -> Result<PodTracker, TrackError> {
        let cfg = super::super::effects::config_of(kubeconfig).await?;
        let state: Arc<Mutex<State>> = Arc::default();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (ns, selector, s) = (ns.to_owned(), selector.to_owned(), state.clone());
        // The client is made on the watch's runtime: its connections live there.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("sim-resume-watch".into())
            .spawn(move || {
                rt.block_on(async move {
                    let client = match Client::try_from(cfg) {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let api: Api<Pod> = Api::namespaced(client, &ns);
                    let wc = watcher::Config::default().labels(&selector);
                    let mut events = watcher(api, wc).boxed();
                    let pump = async {
                        while let Some(ev) = events.next().await {
                            match ev {
                                Ok(ev) => {
                                    if let Ok(mut st) = s.lock() {
                                        st.on_event(ev, SystemTime::now());
                                    }
                                }
                                Err(e) => tracing::debug!(error = %e, "sim resume pod watch"),
                            }
                        }
                    };
                    tokio::select! {
                        _ = pump => {}
                        _ = stop_rx => {}
                    }
                });
            })?;
        let started = ready_rx.await.unwrap_or_else(|_| {
            Err(kube::Error::Service(
                "the pod watch thread ended early".into(),
            ))
        });
        let tracker = PodTracker {
            state,
            _thread: super::super::effects::WatchThread::new(stop_tx, thread),
        };
        started.map(|()| tracker).map_err(TrackError::Kube)
    }

    /// Every pod as last seen.
    pub fn pods(&self) -> Vec<PodView> {
        self.state
            .lock()
            .map(|s| s.pods.values().cloned().collect())
            .unwrap_or_default()
    }

    /// From now on, watch for the job to resume with `pods` pods, against
    /// the pods as they are now (`fresh_only`: every pod must be new).
    pub fn arm(&self, pods: usize, fresh_only: bool) {
        if let Ok(mut s) = self.state.lock() {
            let before = s
                .pods
                .values()
                .map(|p| (p.uid.clone(), p.agent_restarts))
                .collect();
            s.goal = Some(Goal {
                pods,
                before,
                fresh_only,
            });
            s.resumed = None;
            s.back.clear();
        }
    }

    /// Where the job stands: pods not being deleted, of them Running and
    /// Ready, and of those back in the new generation (0 before
    /// [`Self::arm`]).
    pub fn progress(&self) -> (usize, usize, usize) {
        let Ok(s) = self.state.lock() else {
            return (0, 0, 0);
        };
        let live: Vec<&PodView> = s.pods.values().filter(|p| !p.deleting).collect();
        let serving = live.iter().filter(|p| p.serving()).count();
        let back = s
            .goal
            .as_ref()
            .map_or(0, |g| live.iter().filter(|p| g.back(p)).count());
        (live.len(), serving, back)
    }

    /// The pods of the job now (not being deleted), each with when it was
    /// first seen back in the new generation since [`Self::arm`] (as it was
    /// then); pods not back are left out.
    pub fn back_times(&self) -> Vec<(PodView, SystemTime)> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        s.pods
            .values()
            .filter(|p| !p.deleting)
            .filter_map(|p| s.back.get(&p.uid).cloned())
            .collect()
    }

    /// When the job resumed, once it has.
    pub fn resumed(&self) -> Option<Resumed> {
        self.state.lock().ok().and_then(|s| s.resumed.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, name: &str, ready: bool, agent_restarts: i32, deleting: bool) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"nodeName": "node-0001", "containers": []},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}],
                "initContainerStatuses": [{"name": AGENT_CONTAINER, "restartCount": agent_restarts,
                    "ready": false, "image": "x", "imageID": ""}]},
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
        }
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn a_job_resumes_when_every_pod_is_back_in_the_new_generation() {
        let t = SystemTime::UNIX_EPOCH;
        let mut s = State::default();
        s.on_event(watcher::Event::Apply(pod("a", "j-0", true, 0, false)), t);
        s.on_event(watcher::Event::Apply(pod("b", "j-1", true, 0, false)), t);
        let before = s.pods.values().map(|p| (p.uid.clone(), 0)).collect();
        s.goal = Some(Goal {
            pods: 2,
            before,
            fresh_only: false,
        });
        // Ready but not restarted: the old generation.
        s.on_event(watcher::Event::Apply(pod("a", "j-0", true, 0, false)), t);
        assert_eq!(s.resumed, None);
        s.on_event(watcher::Event::Apply(pod("a", "j-0", true, 1, false)), t);
        assert_eq!(s.resumed, None, "j-1 is behind");
        // j-1 replaced: the old one deleting, a new one not yet ready.
        s.on_event(watcher::Event::Apply(pod("b", "j-1", false, 0, true)), t);
        s.on_event(watcher::Event::Delete(pod("b", "j-1", false, 0, true)), t);
        s.on_event(watcher::Event::Apply(pod("c", "j-1", false, 0, false)), t);
        assert_eq!(s.resumed, None);
        s.on_event(watcher::Event::Apply(pod("c", "j-1", true, 0, false)), t);
        assert_eq!(
            s.resumed.as_ref().map(|r| r.last_pod.as_str()),
            Some("j-1"),
            "the new pod needs no restart"
        );
    }

    #[test]
    fn each_pod_is_stamped_when_it_is_first_back() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        let mut s = State::default();
        s.on_event(
            watcher::Event::Apply(pod("a", "j-0", true, 0, false)),
            at(0),
        );
        s.on_event(
            watcher::Event::Apply(pod("b", "j-1", true, 0, false)),
            at(0),
        );
        let before = s.pods.values().map(|p| (p.uid.clone(), 0)).collect();
        s.goal = Some(Goal {
            pods: 2,
            before,
            fresh_only: false,
        });
        s.on_event(
            watcher::Event::Apply(pod("a", "j-0", false, 1, false)),
            at(1),
        );
        assert!(s.back.is_empty(), "restarted but not Ready: not back");
        s.on_event(
            watcher::Event::Apply(pod("a", "j-0", true, 1, false)),
            at(2),
        );
        s.on_event(
            watcher::Event::Apply(pod("a", "j-0", true, 1, false)),
            at(3),
        );
        s.on_event(
            watcher::Event::Apply(pod("b", "j-1", true, 1, false)),
            at(5),
        );
        let mut got: Vec<(String, SystemTime)> =
            s.back.values().map(|(p, t)| (p.name.clone(), *t)).collect();
        got.sort();
        assert_eq!(
            got,
            [("j-0".to_string(), at(2)), ("j-1".to_string(), at(5))],
            "the first time each was back, not a later event"
        );
    }

    #[test]
    fn a_recreate_counts_only_new_pods() {
        let t = SystemTime::UNIX_EPOCH;
        let mut s = State::default();
        s.on_event(watcher::Event::Apply(pod("a", "j-0", true, 0, false)), t);
        let before = s.pods.values().map(|p| (p.uid.clone(), 0)).collect();
        s.goal = Some(Goal {
            pods: 1,
            before,
            fresh_only: true,
        });
        // The old pod's agent restarted it in place (the generation is
        // released at once for a recreate): it is still to be replaced.
        s.on_event(watcher::Event::Apply(pod("a", "j-0", true, 1, false)), t);
        assert_eq!(s.resumed, None);
        s.on_event(watcher::Event::Delete(pod("a", "j-0", true, 1, true)), t);
        s.on_event(watcher::Event::Apply(pod("b", "j-0", true, 0, false)), t);
        assert_eq!(s.resumed.as_ref().map(|r| r.last_pod.as_str()), Some("j-0"));
    }
}
