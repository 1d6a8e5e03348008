//! The publisher task: renders the view and writes ClusterD's ConfigMaps.
//!
//! - Only while this replica leads; on takeover (and every
//!   [`PublishConfig::resync`]) it lists what exists and reconciles: creates
//!   missing ConfigMaps, updates changed ones, deletes surplus device shards.
//! - Only ConfigMaps whose data changed are written: an update with equal
//!   content would be a no-op on the API server anyway (no new
//!   resourceVersion, no watch event), so there is no periodic rewrite.
//! - Changes are coalesced (a short debounce, then one render of everything
//!   that changed meanwhile) and writes are spaced by
//!   [`PublishConfig::min_write_interval`] (5 per second, ClusterD's rate).
//! - Updates carry the resourceVersion read (optimistic concurrency, the
//!   same on a real API server); a conflict or a missing object sends the
//!   next round through a reconcile. API errors are logged, counted in
//!   `rebound_clusterd_view_errors_total` and retried; never fatal.

use super::ClusterdView;
use super::render::{self, DEVICE_PREFIX, FAULT_JOB_CM, NODE_CM};
use crate::k8s::leader::Leadership;
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Label the Volcano plugin selects ClusterD's ConfigMaps by.
pub const CONSUMER_LABEL: (&str, &str) = ("mx-consumer-volcano", "true");
/// Label marking rebound's own writes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "rebound");

/// Where and how fast to publish.
#[derive(Clone, Debug)]
pub struct PublishConfig {
    /// Namespace of `cluster-info-*` (ClusterD: `mindx-dl`).
    pub namespace: String,
    /// Namespace of `fault-job-info` (ClusterD: `cluster-system`).
    pub job_namespace: String,
    /// Bound of one ConfigMap's data in bytes.
    pub max_bytes: usize,
    /// Least time between two writes.
    pub min_write_interval: Duration,
    /// Wait after a change before rendering, to batch a burst.
    pub debounce: Duration,
    /// Re-list and repair drift this often while leading.
    pub resync: Duration,
}

impl PublishConfig {
    /// ClusterD's bounds and rates in the given namespaces.
    pub fn new(namespace: &str, job_namespace: &str) -> PublishConfig {
        PublishConfig {
            namespace: namespace.to_string(),
            job_namespace: job_namespace.to_string(),
            max_bytes: render::MAX_BYTES,
            min_write_interval: Duration::from_millis(200),
            debounce: Duration::from_millis(100),
            resync: Duration::from_secs(60),
        }
    }
}

/// Why one write failed; logged and counted, then retried.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The API server refused or failed a request on a ConfigMap.
    #[error("{verb} configmap {namespace}/{name}: {source}")]
    Api {
        verb: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

type Key = (String, String); // (namespace, name)

/// What the API server holds, as last read or written.
#[derive(Clone, Debug)]
struct Known {
    resource_version: Option<String>,
    data: BTreeMap<String, String>,
}

struct Publisher {
    client: kube::Client,
    cfg: PublishConfig,
    metrics: Metrics,
    leader: Leadership,
    known: BTreeMap<Key, Known>,
    synced: bool,
    last_sync: Instant,
    last_write: Option<Instant>,
    assignment: render::Assignment,
    /// After a failure, no round before this (doubling up to 30 s), so a
    /// missing namespace or a down API server is not hammered.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// First wait after a failed round; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between failed rounds.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Start the publisher; it stops when `shutdown` turns true.
pub fn spawn(
    client: kube::Client,
    view: ClusterdView,
    leader: Leadership,
    metrics: Metrics,
    cfg: PublishConfig,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lead = leader.subscribe();
        let mut p = Publisher {
            client,
            cfg,
            metrics,
            leader,
            known: BTreeMap::new(),
            synced: false,
            last_sync: Instant::now(),
            last_write: None,
            assignment: render::Assignment::default(),
            retry_at: None,
            backoff: MIN_BACKOFF,
        };
        loop {
            let timer = tokio::select! {
                _ = shutdown.changed() => return,
                _ = view.changed() => false,
                _ = lead.changed() => false,
                // Finished jobs expire and resyncs come due without a change.
                _ = tokio::time::sleep(Duration::from_secs(1)) => true,
            };
            if *shutdown.borrow() {
                return;
            }
            if !p.leader.is_leader() {
                // What we knew may be stale when we lead again.
                p.synced = false;
                continue;
            }
            // An expiry is a change: it wakes the next iteration.
            view.expire_jobs(chrono::Utc::now());
            if timer && p.synced && p.last_sync.elapsed() < p.cfg.resync {
                continue;
            }
            if p.retry_at.is_some_and(|t| Instant::now() < t) {
                continue; // the timer brings us back
            }
            tokio::time::sleep(p.cfg.debounce).await;
            p.round(&view).await;
        }
    })
}

fn api_error(verb: &'static str, key: &Key, source: kube::Error) -> PublishError {
    PublishError::Api {
        verb,
        namespace: key.0.clone(),
        name: key.1.clone(),
        source,
    }
}

fn code_of(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn is_ours(name: &str) -> bool {
    name == NODE_CM
        || name
            .strip_prefix(DEVICE_PREFIX)
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

impl Publisher {
    fn failed(&mut self, e: &PublishError) {
        let PublishError::Api { verb, .. } = e;
        tracing::warn!(error = %e, retry_in = ?self.backoff, "ClusterD view: request failed; will retry");
        self.metrics.clusterd_error(verb);
        self.synced = false;
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// One round: reconcile if needed, render, write what changed; a round
    /// without failure resets the backoff.
    async fn round(&mut self, view: &ClusterdView) {
        self.retry_at = None;
        self.write_round(view).await;
        if self.retry_at.is_none() {
            self.backoff = MIN_BACKOFF;
        }
    }

    async fn write_round(&mut self, view: &ClusterdView) {
        if !self.synced || self.last_sync.elapsed() >= self.cfg.resync {
            match self.reconcile().await {
                Ok(()) => {
                    self.synced = true;
                    self.last_sync = Instant::now();
                }
                Err(e) => return self.failed(&e),
            }
        }
        // Render a copy: the reactor is not held up while it renders.
        let state = view.read(|s| s.clone());
        let r = render::render(&state, &self.assignment, self.cfg.max_bytes);
        self.assignment = r.assignment.clone();
        if !r.assignment.too_big.is_empty() || r.node_cm_dropped > 0 {
            tracing::warn!(
                too_big = ?r.assignment.too_big,
                node_cm_dropped = r.node_cm_dropped,
                "ClusterD view: entries left out to stay within {} bytes per ConfigMap",
                self.cfg.max_bytes
            );
        }
        let ns = self.cfg.namespace.clone();
        let mut desired: Vec<(Key, BTreeMap<String, String>, bool)> = Vec::new();
        for (i, value) in r.device_shards {
            let name = format!("{DEVICE_PREFIX}{i}");
            desired.push((
                (ns.clone(), name.clone()),
                BTreeMap::from([(name, value)]),
                true,
            ));
        }
        desired.push((
            (ns.clone(), NODE_CM.to_string()),
            BTreeMap::from([(NODE_CM.to_string(), r.node_cm)]),
            true,
        ));
        desired.push((
            (self.cfg.job_namespace.clone(), FAULT_JOB_CM.to_string()),
            r.fault_jobs,
            false,
        ));
        let surplus: Vec<Key> = self
            .known
            .keys()
            .filter(|k| k.0 == ns && k.1.starts_with(DEVICE_PREFIX))
            .filter(|k| !desired.iter().any(|(d, _, _)| d == *k))
            .cloned()
            .collect();
        for (key, data, consumer) in desired {
            if self.known.get(&key).is_some_and(|k| k.data == data) {
                continue;
            }
            if !self.leader.is_leader() {
                return;
            }
            if let Err(e) = self.write(&key, data, consumer).await {
                self.failed(&e);
            }
        }
        for key in surplus {
            if !self.leader.is_leader() {
                return;
            }
            self.pace().await;
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.0);
            match api.delete(&key.1, &DeleteParams::default()).await {
                Ok(_) => {
                    self.metrics.clusterd_write("delete");
                    self.known.remove(&key);
                }
                Err(e) if code_of(&e) == Some(404) => {
                    self.known.remove(&key);
                }
                Err(e) => self.failed(&api_error("delete", &key, e)),
            }
        }
    }

    /// Wait until the next write is allowed.
    async fn pace(&mut self) {
        if let Some(t) = self.last_write {
            tokio::time::sleep_until(t + self.cfg.min_write_interval).await;
        }
        self.last_write = Some(Instant::now());
    }

    /// Create or update one ConfigMap to `data`.
    async fn write(
        &mut self,
        key: &Key,
        data: BTreeMap<String, String>,
        consumer: bool,
    ) -> Result<(), PublishError> {
        let mut labels = BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]);
        if consumer {
            labels.insert(CONSUMER_LABEL.0.into(), CONSUMER_LABEL.1.into());
        }
        let known_rv = self.known.get(key).map(|k| k.resource_version.clone());
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(key.1.clone()),
                namespace: Some(key.0.clone()),
                labels: Some(labels),
                resource_version: known_rv.clone().flatten(),
                ..Default::default()
            },
            data: Some(data.clone()),
            ..Default::default()
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.0);
        self.pace().await;
        let (verb, res) = if known_rv.is_some() {
            (
                "update",
                api.replace(&key.1, &PostParams::default(), &cm).await,
            )
        } else {
            ("create", api.create(&PostParams::default(), &cm).await)
        };
        match res {
            Ok(done) => {
                self.metrics.clusterd_write(verb);
                self.known.insert(
                    key.clone(),
                    Known {
                        resource_version: done.metadata.resource_version,
                        data,
                    },
                );
                Ok(())
            }
            Err(e) => {
                // Someone else wrote it (a takeover, ClusterD, a person):
                // read it back; the next round updates from there.
                match code_of(&e) {
                    Some(409) => {
                        if let Ok(Some(cur)) = api.get_opt(&key.1).await {
                            self.remember(key, cur);
                        }
                    }
                    Some(404) => {
                        self.known.remove(key);
                    }
                    _ => {}
                }
                Err(api_error(verb, key, e))
            }
        }
    }

    fn remember(&mut self, key: &Key, cm: ConfigMap) {
        self.known.insert(
            key.clone(),
            Known {
                resource_version: cm.metadata.resource_version,
                data: cm.data.unwrap_or_default(),
            },
        );
    }

    /// Read what exists: ClusterD-labelled view ConfigMaps and fault-job-info.
    async fn reconcile(&mut self) -> Result<(), PublishError> {
        let ns = self.cfg.namespace.clone();
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &ns);
        let sel = format!("{}={}", CONSUMER_LABEL.0, CONSUMER_LABEL.1);
        let list = api
            .list(&ListParams::default().labels(&sel))
            .await
            .map_err(|e| api_error("list", &(ns.clone(), String::new()), e))?;
        self.known.clear();
        for cm in list.items {
            let name = cm.metadata.name.clone().unwrap_or_default();
            if is_ours(&name) {
                self.remember(&(ns.clone(), name), cm);
            }
        }
        let key = (self.cfg.job_namespace.clone(), FAULT_JOB_CM.to_string());
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.0);
        match api.get_opt(&key.1).await {
            Ok(Some(cm)) => self.remember(&key, cm),
            Ok(None) => {}
            Err(e) => return Err(api_error("get", &key, e)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_view_configmaps_are_ours() {
        assert!(is_ours("cluster-info-node-cm"));
        assert!(is_ours("cluster-info-device-12"));
        assert!(!is_ours("cluster-info-device-"));
        assert!(!is_ours("cluster-info-switch-0"));
        assert!(!is_ours("cluster-info-device-x"));
    }
}
