//! Who wrote what during one recovery, from the server's log: the pods of
//! the new generation by their creator, the span of the creates and of the
//! deletes, every write by its writer. On the real operators this is what
//! says which component recreated the pods and at what rate (the inputs of
//! the recreate model, `super::floor`); on the simulated ones, the same
//! figures for the model itself.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::super::analyse::ms_between;
use super::super::serverlog::ServerRequest;

/// The writes of one recovery, by writer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RecoveryWrites {
    /// Pods created from the fault on, by the creator's user agent up to
    /// its first `/` (`vc-controller-manager`, `training-operator.v1`,
    /// `kube-controller-manager`, …).
    pub created_by: BTreeMap<String, usize>,
    /// Server clock, seconds after the fault's commit: the first pod
    /// create received and the last one completed. Their creator's rate is
    /// `(creates − 1) / (last − first)` when one client made them.
    pub creates_s: Option<(f64, f64)>,
    /// The same span for the pod deletes (`delete`, `deletecollection`:
    /// rebound's one request deletes every pod, one after another inside
    /// the server; an operator's kill sends one per pod).
    pub deletes_s: Option<(f64, f64)>,
    /// How long the server took over each `deletecollection` of pods
    /// (rebound's one request: the server deletes the pods one after
    /// another before it answers), seconds.
    pub delete_collection_s: Vec<f64>,
    /// Every write from the fault on, by `writer: verb resource[/sub]`
    /// (node Leases left out), with when they were sent: the recovery's
    /// phases, component by component.
    pub by_writer: BTreeMap<String, WriterSpan>,
}

/// The writes of one kind by one writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WriterSpan {
    /// How many (answered with any status).
    pub count: usize,
    /// Server clock, seconds after the fault's commit: the first received.
    pub first_s: f64,
    /// The last received.
    pub last_s: f64,
}

impl std::fmt::Display for WriterSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count > 1 {
            write!(
                f,
                "{} ({:.2} → {:.2} s)",
                self.count, self.first_s, self.last_s
            )
        } else {
            write!(f, "{} ({:.2} s)", self.count, self.first_s)
        }
    }
}

/// The user agent up to its first `/`, or `(no user agent)`.
pub fn writer(r: &ServerRequest) -> String {
    let ua = r.user_agent.as_deref().unwrap_or("(no user agent)");
    ua.split('/').next().unwrap_or(ua).to_owned()
}

fn is_write(r: &ServerRequest) -> bool {
    matches!(
        r.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// The writes of `reqs` from `since` (the fault's commit) on.
pub fn recovery_writes(reqs: &[ServerRequest], since: SystemTime) -> RecoveryWrites {
    let mut out = RecoveryWrites::default();
    let after: Vec<&ServerRequest> = reqs
        .iter()
        .filter(|r| r.received >= since && is_write(r) && r.resource != "leases")
        .collect();
    let span = |rs: &[&&ServerRequest]| -> Option<(f64, f64)> {
        let first = rs.iter().map(|r| r.received).min()?;
        let last = rs.iter().map(|r| r.completed).max()?;
        Some((
            ms_between(since, first) / 1000.0,
            ms_between(since, last) / 1000.0,
        ))
    };
    let pod_write = |r: &&&ServerRequest, verbs: &[&str]| {
        r.resource == "pods"
            && r.subresource.is_empty()
            && r.status < 300
            && verbs.contains(&r.verb.as_str())
    };
    let creates: Vec<&&ServerRequest> =
        after.iter().filter(|r| pod_write(r, &["create"])).collect();
    for r in &creates {
        *out.created_by.entry(writer(r)).or_default() += 1;
    }
    out.creates_s = span(&creates);
    let deletes: Vec<&&ServerRequest> = after
        .iter()
        .filter(|r| pod_write(r, &["delete", "deletecollection"]))
        .collect();
    out.deletes_s = span(&deletes);
    out.delete_collection_s = deletes
        .iter()
        .filter(|r| r.verb == "deletecollection")
        .map(|r| ms_between(r.received, r.completed) / 1000.0)
        .collect();
    for r in &after {
        let at = ms_between(since, r.received) / 1000.0;
        let e = out
            .by_writer
            .entry(format!("{}: {}", writer(r), r.verb_key()))
            .or_insert(WriterSpan {
                count: 0,
                first_s: at,
                last_s: at,
            });
        e.count += 1;
        e.first_s = e.first_s.min(at);
        e.last_s = e.last_s.max(at);
    }
    out
}

/// Pods a second between the first and the last create, where there are
/// at least two.
pub fn create_rate(w: &RecoveryWrites) -> Option<f64> {
    let n: usize = w.created_by.values().sum();
    let (a, b) = w.creates_s?;
    (n >= 2 && b > a).then(|| (n - 1) as f64 / (b - a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(at_ms: u64, verb: &str, resource: &str, ua: &str) -> ServerRequest {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(at_ms);
        ServerRequest {
            received: t,
            completed: t + Duration::from_millis(5),
            verb: verb.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: Some("sim".into()),
            name: None,
            query: String::new(),
            status: 201,
            user_agent: Some(ua.into()),
        }
    }

    #[test]
    fn creates_are_counted_by_creator_and_their_span_gives_the_rate() {
        let since = SystemTime::UNIX_EPOCH + Duration::from_millis(1000);
        let mut reqs = vec![
            // Before the fault: the job's first pods, not counted.
            req(500, "create", "pods", "vc-controller-manager/v1.14.1"),
            req(1100, "deletecollection", "pods", "rebound-controller/0.1"),
        ];
        for i in 0..11 {
            reqs.push(req(
                3000 + i * 100,
                "create",
                "pods",
                "vc-controller-manager/v1.14.1 (linux/amd64)",
            ));
        }
        reqs.push(req(4000, "patch", "leases", "kube-scheduler/v1.36"));
        let w = recovery_writes(&reqs, since);
        assert_eq!(
            w.created_by.into_iter().collect::<Vec<_>>(),
            [("vc-controller-manager".to_owned(), 11)]
        );
        let (a, b) = w.creates_s.expect("creates");
        assert!(
            (a - 2.0).abs() < 1e-9 && (b - 3.005).abs() < 1e-9,
            "{a} {b}"
        );
        assert_eq!(w.deletes_s.map(|d| d.0), Some(0.1));
        assert_eq!(w.delete_collection_s.len(), 1);
        assert!((w.delete_collection_s[0] - 0.005).abs() < 1e-9);
        assert_eq!(
            w.by_writer
                .get("rebound-controller: deletecollection pods")
                .map(|s| s.count),
            Some(1)
        );
        let c = w.by_writer["vc-controller-manager: create pods"];
        assert_eq!(c.count, 11);
        assert!((c.first_s - 2.0).abs() < 1e-9 && (c.last_s - 3.0).abs() < 1e-9);
        assert_eq!(c.to_string(), "11 (2.00 → 3.00 s)");
        assert!(!w.by_writer.keys().any(|k| k.contains("leases")));
        let r = create_rate(&recovery_writes(&reqs, since)).expect("rate");
        assert!((r - 10.0 / 1.005).abs() < 1e-9, "{r}");
    }
}
