//! What the API server saw, in one shape whichever server it was: the
//! embedded server's request log, or a real kube-apiserver's audit log
//! (which `rebound sim --assets` turns on through
//! [`crate::envtest::ControlPlaneConfig::audit_policy`]). Both give,
//! per request, when it arrived and when its answer was complete, on the
//! machine's wall clock, so reaction is measured the same way on both.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Deserialize;

use crate::RequestRecord;

/// The audit policy of `rebound sim` on a real server: every write at
/// `Metadata` level, once, when its answer is complete (whose event still
/// carries when the request arrived); no reads, and no node Leases (the
/// simulated kubelets renew 2,000 of them every 10 s), so the log stays
/// small and costs the server little.
pub const SIM_AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  verbs: [get, list, watch]
- level: None
  resources:
  - group: coordination.k8s.io
    resources: [leases]
- level: Metadata
"#;

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRequest {
    /// When it arrived.
    pub received: SystemTime,
    /// When its answer was complete (for the writes measured: committed).
    pub completed: SystemTime,
    /// Kubernetes verb (`create`, `patch`, `deletecollection`, ...).
    pub verb: String,
    /// Resource plural (`pods`).
    pub resource: String,
    /// Subresource (`status`), empty when none.
    pub subresource: String,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name, if the request named one.
    pub name: Option<String>,
    /// Raw (percent-encoded) query string.
    pub query: String,
    /// HTTP status of the answer.
    pub status: u16,
    /// `User-Agent`, if any.
    pub user_agent: Option<String>,
}

impl ServerRequest {
    /// From the embedded server's request log.
    pub fn from_record(r: &RequestRecord) -> ServerRequest {
        ServerRequest {
            received: r.wall,
            completed: r.wall + r.elapsed,
            verb: r.verb.to_owned(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            query: r.query.clone(),
            status: r.status,
            user_agent: r.user_agent.clone(),
        }
    }

    /// `verb resource[/subresource]`: how the reports count writes.
    pub fn verb_key(&self) -> String {
        if self.subresource.is_empty() {
            format!("{} {}", self.verb, self.resource)
        } else {
            format!("{} {}/{}", self.verb, self.resource, self.subresource)
        }
    }

    /// Whether the controller sent it (its User-Agent is
    /// `rebound-controller/<version>`).
    pub fn by_controller(&self) -> bool {
        self.user_agent
            .as_deref()
            .is_some_and(|u| u.starts_with("rebound-controller/"))
    }
}

/// Why the audit log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file could not be opened or read.
    #[error("audit log {path}: {source}")]
    Io {
        /// The log.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The parts of an `audit.k8s.io/v1` Event used here.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    stage: String,
    #[serde(default, rename = "requestURI")]
    request_uri: String,
    verb: String,
    #[serde(default)]
    user_agent: Option<String>,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    request_received_timestamp: String,
    stage_timestamp: String,
}

/// An RFC 3339 time (`2026-12-01T10:00:00.123456Z`) on the wall clock.
fn wall(t: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|d| d.with_timezone(&chrono::Utc).into())
}

#[derive(Debug, Default, Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: u16,
}

/// One line of the audit log, if it is a `ResponseComplete` event (the
/// others, and lines that are not events, give `None`).
pub fn parse_audit_line(line: &str) -> Option<ServerRequest> {
    let ev: AuditEvent = serde_json::from_str(line).ok()?;
    if ev.stage != "ResponseComplete" {
        return None;
    }
    let obj = ev.object_ref.unwrap_or_default();
    let query = ev
        .request_uri
        .split_once('?')
        .map(|(_, q)| q.to_owned())
        .unwrap_or_default();
    Some(ServerRequest {
        received: wall(&ev.request_received_timestamp)?,
        completed: wall(&ev.stage_timestamp)?,
        verb: ev.verb,
        resource: obj.resource,
        subresource: obj.subresource,
        namespace: obj.namespace,
        name: obj.name,
        query,
        status: ev.response_status.map_or(0, |s| s.code),
        user_agent: ev.user_agent,
    })
}

/// A position in a growing audit log: what was written after it is read
/// (the set-up's tens of thousands of writes are skipped, not parsed).
#[derive(Debug, Clone)]
pub struct AuditCursor {
    path: PathBuf,
    offset: u64,
}

impl AuditCursor {
    /// The end of the log now.
    pub fn at_end(path: &Path) -> Result<AuditCursor, AuditError> {
        let offset = std::fs::metadata(path)
            .map_err(|source| AuditError::Io {
                path: path.to_owned(),
                source,
            })?
            .len();
        Ok(AuditCursor {
            path: path.to_owned(),
            offset,
        })
    }

    /// The `ResponseComplete` events written since the cursor, and how
    /// many lines were not events (a line still being written at the end).
    pub fn read(&self) -> Result<(Vec<ServerRequest>, usize), AuditError> {
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        let mut f = std::fs::File::open(&self.path).map_err(io)?;
        f.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut text = String::new();
        f.read_to_string(&mut text).map_err(io)?;
        let mut bad = 0;
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match parse_audit_line(line) {
                Some(r) => out.push(r),
                None if serde_json::from_str::<serde_json::Value>(line).is_ok() => {}
                None => bad += 1,
            }
        }
        Ok((out, bad))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An event as kube-apiserver v1.36 writes it (`--audit-log-format=json`).
    const EVENT: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"5b0c","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/sim-x/pods?labelSelector=training.kubeflow.org%2Fjob-name%3Djob-7","verb":"deletecollection","user":{"username":"rebound-envtest-admin","groups":["system:masters","system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"rebound-controller/0.1.0","objectRef":{"resource":"pods","namespace":"sim-x","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-01T10:00:00.123456Z","stageTimestamp":"2026-12-01T10:00:00.130001Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#;

    #[test]
    fn an_audit_event_gives_both_timestamps_to_the_microsecond() {
        let r = parse_audit_line(EVENT).expect("event");
        assert_eq!(r.verb, "deletecollection");
        assert_eq!(r.resource, "pods");
        assert_eq!(r.namespace.as_deref(), Some("sim-x"));
        assert_eq!(r.name, None);
        assert_eq!(
            r.query,
            "labelSelector=training.kubeflow.org%2Fjob-name%3Djob-7"
        );
        assert_eq!(r.status, 200);
        assert!(r.by_controller());
        assert_eq!(
            r.completed.duration_since(r.received).expect("ordered"),
            Duration::from_micros(6545)
        );
        let stage = EVENT.replace("ResponseComplete", "RequestReceived");
        assert_eq!(parse_audit_line(&stage), None);
        assert_eq!(parse_audit_line("not json"), None);
    }

    #[test]
    fn the_cursor_reads_only_what_was_written_after_it() {
        let dir = std::env::temp_dir().join(format!(
            "rebound-audit-test-{}-{}",
            std::process::id(),
            crate::actors::util::name_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("audit.log");
        let before = EVENT.replace("job-7", "job-1");
        std::fs::write(&path, format!("{before}\n")).expect("write");
        let cursor = AuditCursor::at_end(&path).expect("cursor");
        let status = EVENT
            .replace("deletecollection", "patch")
            .replace(
                r#""namespace":"sim-x","#,
                r#""namespace":"sim-x","name":"job-7-worker-0","subresource":"status","#,
            )
            .replace("rebound-controller/0.1.0", "rebound-sim");
        let partial = &EVENT[..40];
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        std::io::Write::write_all(&mut f, format!("{EVENT}\n{status}\n{partial}").as_bytes())
            .expect("append");
        let (reqs, bad) = cursor.read().expect("read");
        assert_eq!(bad, 1, "the line still being written");
        assert_eq!(reqs.len(), 2);
        assert!(reqs[0].query.contains("job-7"));
        assert_eq!(reqs[1].name.as_deref(), Some("job-7-worker-0"));
        assert_eq!(reqs[1].subresource, "status");
        assert!(!reqs[1].by_controller());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
