//! The request log: one record per HTTP request, kept in memory and
//! broadcast, so tests and `rebound sim` can count API calls and time the
//! operator's reactions without polling.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use tokio::sync::broadcast;

/// One served request.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// When the request arrived (monotonic, for measuring reactions).
    pub at: Instant,
    /// When the request arrived (wall clock, for display).
    pub wall: SystemTime,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete,
    /// deletecollection (discovery and other reads are `get`).
    pub verb: &'static str,
    /// HTTP method.
    pub method: String,
    /// Request path without the query.
    pub path: String,
    /// Raw query string (empty when none).
    pub query: String,
    /// Request `Content-Type`, if any.
    pub content_type: Option<String>,
    /// HTTP status of the answer (200 for watches that started).
    pub status: u16,
    /// Time from arrival to the answer's head (for watches: until the
    /// stream started), injected latency included.
    pub elapsed: std::time::Duration,
    /// `User-Agent` header, if any.
    pub user_agent: Option<String>,
    /// Resource plural (e.g. `pods`), empty for discovery.
    pub resource: String,
    /// Subresource (e.g. `status`), empty when none.
    pub subresource: String,
    /// Namespace in the path, if any.
    pub namespace: Option<String>,
    /// Object name in the path, if any.
    pub name: Option<String>,
}

/// Thread-safe log with a broadcast of new records.
#[derive(Debug)]
pub struct RequestLog {
    records: Mutex<Vec<RequestRecord>>,
    tx: broadcast::Sender<RequestRecord>,
}

impl Default for RequestLog {
    fn default() -> Self {
        Self {
            records: Mutex::new(Vec::new()),
            tx: broadcast::channel(16_384).0,
        }
    }
}

impl RequestLog {
    /// Appends a record and notifies subscribers.
    pub fn push(&self, rec: RequestRecord) {
        if let Ok(mut g) = self.records.lock() {
            g.push(rec.clone());
        }
        let _ = self.tx.send(rec);
    }

    /// Snapshot of all records since the last `clear`.
    pub fn snapshot(&self) -> Vec<RequestRecord> {
        self.records.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Forgets all records.
    pub fn clear(&self) {
        if let Ok(mut g) = self.records.lock() {
            g.clear();
        }
    }

    /// Receives every record pushed after this call.
    pub fn subscribe(&self) -> broadcast::Receiver<RequestRecord> {
        self.tx.subscribe()
    }

    /// Number of requests per verb.
    pub fn counts_by_verb(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        if let Ok(g) = self.records.lock() {
            for r in g.iter() {
                *m.entry(r.verb).or_insert(0) += 1;
            }
        }
        m
    }
}
