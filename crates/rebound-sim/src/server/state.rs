//! Shared server state: the resource registry, the store, the request log,
//! fault injection, pod logs and options. One `Arc<Shared>` is behind every
//! request handler and every handle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::inject::FaultInjector;
use super::log::RequestLog;
use super::resources::{Registry, ResourceInfo};
use super::store::Store;

/// Server options chosen at build time.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Loopback port (0 = any free port).
    pub port: u16,
    /// Events kept for watches to resume from.
    pub history: usize,
    /// Events buffered per watcher before a slow watcher is cut off.
    pub broadcast: usize,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Pods bound to a node and deleted with a grace period stay (with
    /// `deletionTimestamp`) until deleted again with `gracePeriodSeconds=0`,
    /// as a kubelet would; off = pod deletion is immediate.
    pub hold_pod_deletion: bool,
    /// `gitVersion` reported at `/version`.
    pub git_version: String,
    /// Newest request records kept by the request log.
    pub request_log_capacity: usize,
    /// Worker threads of the server's own runtime; 0 serves on the
    /// caller's runtime (tests). `rebound sim` gives the server its own,
    /// as a real API server has its own machines.
    pub threads: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            port: 0,
            history: 50_000,
            broadcast: 65_536,
            bookmark_interval: Duration::from_secs(5),
            hold_pod_deletion: false,
            git_version: "v1.33.0-rebound-sim".into(),
            request_log_capacity: 500_000,
            threads: 0,
        }
    }
}

/// Everything a request handler needs.
#[derive(Debug)]
pub struct Shared {
    /// Served resources (built-ins and CRDs).
    pub registry: RwLock<Registry>,
    /// Objects, history, watch broadcast.
    pub store: Arc<Store>,
    /// Request log.
    pub log: RequestLog,
    /// Fault injection controls.
    pub inject: FaultInjector,
    /// Container logs set by the simulation: (namespace, pod, container) → text.
    pub pod_logs: Mutex<HashMap<(String, String, String), String>>,
    /// Options.
    pub opts: ServerOptions,
    /// Work for the emulated kube-controller-manager (`controllers`).
    pub kcm: Arc<super::work::Queue>,
    /// Watch events sent, by storage key (`group/plural`): what a watcher
    /// fan-out costs, which the request log cannot show.
    pub watch_events: WatchEventCounts,
}

/// Watch events sent per storage key. Each watch takes its counter once,
/// at its start, and adds to it without a lock.
#[derive(Debug, Default)]
pub struct WatchEventCounts(Mutex<HashMap<Arc<str>, Arc<std::sync::atomic::AtomicU64>>>);

impl WatchEventCounts {
    /// The counter of `key`, made on first use.
    pub fn counter(&self, key: &Arc<str>) -> Arc<std::sync::atomic::AtomicU64> {
        match self.0.lock() {
            Ok(mut m) => m.entry(key.clone()).or_default().clone(),
            Err(_) => Arc::default(),
        }
    }

    /// The events sent so far on `key` (`group/plural`; the core group's
    /// key is `/plural`).
    pub fn sent(&self, key: &str) -> u64 {
        self.0
            .lock()
            .ok()
            .and_then(|m| {
                m.get(key)
                    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            })
            .unwrap_or(0)
    }
}

impl Shared {
    /// Fresh state with the built-in resources.
    pub fn new(opts: ServerOptions) -> Arc<Self> {
        let store = Arc::new(Store::new(opts.history, opts.broadcast));
        Arc::new(Self {
            registry: RwLock::new(Registry::with_builtins()),
            inject: FaultInjector::new(store.clone()),
            store,
            log: RequestLog::with_capacity(opts.request_log_capacity),
            pod_logs: Mutex::new(HashMap::new()),
            opts,
            kcm: Arc::default(),
            watch_events: WatchEventCounts::default(),
        })
    }

    /// Resource at group/version/plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.registry.read().ok()?.lookup(group, version, plural)
    }

    /// Resource by storage key.
    pub fn resource(&self, key: &str) -> Option<Arc<ResourceInfo>> {
        self.registry.read().ok()?.get(key)
    }

    /// Snapshot of the registry.
    pub fn registry_snapshot(&self) -> Registry {
        self.registry.read().map(|r| r.clone()).unwrap_or_default()
    }
}
