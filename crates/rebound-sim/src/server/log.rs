//! The request log: one record per HTTP request, kept in memory and
//! broadcast, so tests and `rebound sim` can count API calls and time the
//! operator's reactions without polling.

use std::collections::{BTreeMap, VecDeque};
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

/// Thread-safe log with a broadcast of new records. Keeps the newest
/// `capacity` records so that long simulations do not grow without bound.
#[derive(Debug)]
pub struct RequestLog {
    records: Mutex<VecDeque<RequestRecord>>,
    capacity: usize,
    tx: broadcast::Sender<RequestRecord>,
}

impl Default for RequestLog {
    fn default() -> Self {
        Self::with_capacity(500_000)
    }
}

impl RequestLog {
    /// A log keeping at most `capacity` records (oldest dropped first).
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            records: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            tx: broadcast::channel(16_384).0,
        }
    }

    /// Appends a record and notifies subscribers.
    pub fn push(&self, rec: RequestRecord) {
        if let Ok(mut g) = self.records.lock() {
            if g.len() >= self.capacity {
                g.pop_front();
            }
            g.push_back(rec.clone());
        }
        let _ = self.tx.send(rec);
    }

    /// Snapshot of all records since the last `clear`.
    pub fn snapshot(&self) -> Vec<RequestRecord> {
        self.records
            .lock()
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(verb: &'static str) -> RequestRecord {
        RequestRecord {
            at: Instant::now(),
            wall: SystemTime::now(),
            verb,
            method: "GET".into(),
            path: "/api/v1/pods".into(),
            query: String::new(),
            content_type: None,
            status: 200,
            elapsed: std::time::Duration::ZERO,
            user_agent: None,
            resource: "pods".into(),
            subresource: String::new(),
            namespace: None,
            name: None,
        }
    }

    #[test]
    fn keeps_the_newest_records_and_broadcasts() {
        let log = RequestLog::with_capacity(2);
        let mut rx = log.subscribe();
        for v in ["list", "watch", "get"] {
            log.push(rec(v));
        }
        let verbs: Vec<&str> = log.snapshot().iter().map(|r| r.verb).collect();
        assert_eq!(verbs, vec!["watch", "get"]);
        assert_eq!(log.counts_by_verb().get("get"), Some(&1));
        assert_eq!(rx.try_recv().map(|r| r.verb).ok(), Some("list"));
        log.clear();
        assert!(log.snapshot().is_empty());
    }
}
