//! Save the tail of a job's container logs into a ConfigMap before its pods
//! are deleted (DESIGN.md §5), without holding the restart up for long.

use super::MANAGED_BY;
use super::error::{RecoverError, api_code, api_error};
use crate::api::policy::WorkloadKind;
use crate::workload::JobRef;
use chrono::{DateTime, Utc};
use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, LogParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// Longest wait for one log read.
pub const LOG_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for all log reads together: what saving logs can add to a
/// restart, however many pods the job has.
pub const LOGS_TOTAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Log reads in flight at once.
pub const LOG_READ_CONCURRENCY: usize = 8;

/// ConfigMap key of the read failures and truncations (pod names cannot
/// start with `_`, so it collides with no `<pod>.<container>` key).
pub const NOTES_KEY: &str = "_notes";
/// Label on every log ConfigMap.
pub const LOGS_LABEL: &str = "rebound.dev/logs";
/// Label naming the job (when its name fits a label value).
pub const JOB_LABEL: &str = "rebound.dev/job";
/// Label naming the job's kind.
pub const JOB_KIND_LABEL: &str = "rebound.dev/job-kind";
/// Annotation: JSON map pod → node, to see where each log came from.
pub const NODES_ANNOTATION: &str = "rebound.dev/nodes";

/// A pod whose logs are saved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLogTarget {
    pub name: String,
    pub containers: Vec<String>,
    /// Containers that restarted in place (`restartCount > 0`): only those
    /// have a previous instance, so only those are asked for
    /// `previous=true` (other asks are 400s).
    pub previous: Vec<String>,
    pub node: Option<String>,
}

impl PodLogTarget {
    /// The target for a pod: its containers, the restarted ones, its node.
    pub fn from_pod(pod: &Pod) -> PodLogTarget {
        let spec = pod.spec.as_ref();
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        PodLogTarget {
            name: pod.metadata.name.clone().unwrap_or_default(),
            containers: spec
                .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default(),
            previous: statuses
                .into_iter()
                .flatten()
                .filter(|s| s.restart_count > 0)
                .map(|s| s.name.clone())
                .collect(),
            node: spec.and_then(|s| s.node_name.clone()),
        }
    }
}

/// What `save_logs` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogsOutcome {
    /// The ConfigMap holding the logs.
    pub config_map: String,
    /// Logs that could not be read (also listed in the ConfigMap).
    pub failures: usize,
    pub requests: u32,
}

/// Save the last `tail_lines` lines of each container of `pods` (and of the
/// previous instance of restarted ones) into a new ConfigMap
/// `rebound-logs-<job>-<unix time>` in the job's namespace, one key per log
/// (`<pod>.<container>` and `<pod>.<container>.previous`).
///
/// Bounded: the values total at most `max_bytes` (each log keeps its tail;
/// short logs leave their share to long ones); each read waits at most
/// `LOG_READ_TIMEOUT`, all reads together `LOGS_TOTAL_TIMEOUT`. A read that
/// fails or times out is noted under `_notes` and the rest is saved: only
/// the ConfigMap create can fail the call, and the caller restarts anyway.
///
/// Owned by the job when its uid is known (garbage-collected with it), but
/// never by a single-pod job: the restart deletes that pod, which would take
/// the logs with it. Labelled `rebound.dev/logs=true`,
/// `rebound.dev/job=<name>`, `rebound.dev/job-kind=<kind>` for finding.
/// Saving twice in the same second finds the ConfigMap there (409) and
/// returns it.
pub async fn save_logs(
    client: &Client,
    job: &JobRef,
    pods: &[PodLogTarget],
    tail_lines: u32,
    max_bytes: u32,
    now: DateTime<Utc>,
) -> Result<LogsOutcome, RecoverError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &job.namespace);
    let deadline = Instant::now() + LOGS_TOTAL_TIMEOUT;
    let reads: Vec<(String, String, LogParams)> = pods
        .iter()
        .flat_map(|p| {
            let current = p.containers.iter().map(move |c| (p, c, false));
            let previous = p.previous.iter().map(move |c| (p, c, true));
            current.chain(previous)
        })
        .map(|(p, c, previous)| {
            let key = if previous {
                format!("{}.{c}.previous", p.name)
            } else {
                format!("{}.{c}", p.name)
            };
            let lp = LogParams {
                container: Some(c.clone()),
                tail_lines: Some(i64::from(tail_lines)),
                previous,
                ..LogParams::default()
            };
            (key, p.name.clone(), lp)
        })
        .collect();
    let requests = reads.len() as u32;
    let cap = max_bytes as usize;
    let results: Vec<(String, LogRead)> = futures::stream::iter(reads)
        .map(|(key, pod, lp)| {
            let api = &api;
            async move {
                let limit = deadline.min(Instant::now() + LOG_READ_TIMEOUT);
                let read = read_log(api, &pod, &lp, cap);
                let result = match tokio::time::timeout_at(limit, read).await {
                    Ok(r) => r,
                    Err(_) => LogRead::Failed("timed out".to_string()),
                };
                (key, result)
            }
        })
        .buffer_unordered(LOG_READ_CONCURRENCY)
        .collect()
        .await;

    let mut logs = Vec::new();
    let mut notes = Vec::new();
    for (key, result) in results {
        match result {
            LogRead::Text(bytes) => logs.push((key, bytes)),
            LogRead::NoPrevious => {}
            LogRead::Failed(e) => notes.push(format!("{key}: not saved: {e}")),
        }
    }
    let failures = notes.len();
    let (data, truncated) = fit(logs, cap, &mut notes);
    let mut data = data;
    if !notes.is_empty() {
        notes.sort();
        let mut text = notes.join("\n");
        text.push('\n');
        let room = cap.saturating_sub(data.values().map(String::len).sum::<usize>());
        data.insert(NOTES_KEY.to_string(), keep_tail(text.as_bytes(), room));
    }
    tracing::debug!(job = %job.id(), logs = data.len(), truncated, failures, "saving logs");

    let name = config_map_name(&job.name, now);
    let cm = ConfigMap {
        metadata: log_config_map_meta(job, &name, pods),
        data: Some(data),
        ..ConfigMap::default()
    };
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &job.namespace);
    let requests = requests + 1;
    match cms.create(&PostParams::default(), &cm).await {
        Ok(_) => {}
        Err(e) if api_code(&e) == Some(409) => {}
        Err(e) => {
            return Err(api_error(
                &job.id(),
                format!("create configmap {name} in {}", job.namespace),
                requests,
            )(e));
        }
    }
    Ok(LogsOutcome {
        config_map: name,
        failures,
        requests,
    })
}

/// The result of one log read.
enum LogRead {
    Text(Vec<u8>),
    /// No previous instance (the API server's 400 for `previous=true`).
    NoPrevious,
    Failed(String),
}

/// One log, keeping at most about `cap` bytes of its tail in memory.
async fn read_log(api: &Api<Pod>, pod: &str, lp: &LogParams, cap: usize) -> LogRead {
    let mut stream = match api.log_stream(pod, lp).await {
        Ok(s) => s,
        Err(e) if lp.previous && api_code(&e) == Some(400) => return LogRead::NoPrevious,
        Err(e) => return LogRead::Failed(e.to_string()),
    };
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            Err(e) => return LogRead::Failed(e.to_string()),
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 2 * cap.max(1) {
            buf.drain(..buf.len() - cap);
        }
    }
    LogRead::Text(buf)
}

/// Share `cap` bytes among the logs, each keeping its tail: logs shorter
/// than an equal share keep all, the rest split what remains. Truncations
/// are noted. Notes get their room from what the logs leave.
fn fit(
    mut logs: Vec<(String, Vec<u8>)>,
    cap: usize,
    notes: &mut Vec<String>,
) -> (BTreeMap<String, String>, usize) {
    logs.sort_by_key(|(_, b)| b.len());
    let mut left = cap.saturating_sub(notes_room(notes.len(), logs.len(), cap));
    let mut count = logs.len();
    let mut data = BTreeMap::new();
    let mut truncated = 0;
    for (key, bytes) in logs {
        let share = left / count.max(1);
        count -= 1;
        let text = keep_tail(&bytes, share);
        if text.len() < bytes.len() {
            truncated += 1;
            notes.push(format!(
                "{key}: kept the last {} of {} bytes",
                text.len(),
                bytes.len()
            ));
        }
        left -= text.len();
        data.insert(key, text);
    }
    (data, truncated)
}

/// Bytes held back for the notes: a line per failure and per log that may
/// be truncated, at most an eighth of the budget.
fn notes_room(failures: usize, logs: usize, cap: usize) -> usize {
    ((failures + logs) * 96).min(cap / 8)
}

/// The last at most `max` bytes of a log as text, cut at a line start when
/// one is in reach, never inside a UTF-8 character (invalid UTF-8 is
/// replaced, which may lengthen it, so the result is re-cut).
fn keep_tail(bytes: &[u8], max: usize) -> String {
    let mut start = bytes.len().saturating_sub(max);
    if start > 0
        && let Some(nl) = bytes[start..].iter().position(|&b| b == b'\n')
        && start + nl + 1 < bytes.len()
    {
        start += nl + 1;
    }
    let text = String::from_utf8_lossy(&bytes[start..]);
    let mut cut = text.len().saturating_sub(max);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

/// `rebound-logs-<job>-<unix time>`, the job part shortened so the name
/// stays a valid object name (253 characters).
fn config_map_name(job: &str, now: DateTime<Utc>) -> String {
    let suffix = format!("-{}", now.timestamp());
    let room = 253 - "rebound-logs-".len() - suffix.len();
    let job: String = job.chars().take(room).collect();
    format!("rebound-logs-{}{suffix}", job.trim_end_matches(['-', '.']))
}

fn log_config_map_meta(job: &JobRef, name: &str, pods: &[PodLogTarget]) -> ObjectMeta {
    let mut labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_string(),
            MANAGED_BY.to_string(),
        ),
        (LOGS_LABEL.to_string(), "true".to_string()),
        (JOB_KIND_LABEL.to_string(), job.kind.as_str().to_string()),
    ]);
    if job.name.len() <= 63 {
        labels.insert(JOB_LABEL.to_string(), job.name.clone());
    }
    let nodes: BTreeMap<&str, &str> = pods
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.node.as_deref()?)))
        .collect();
    let annotations = BTreeMap::from([
        (JOB_LABEL.to_string(), job.id()),
        (
            NODES_ANNOTATION.to_string(),
            serde_json::to_string(&nodes).unwrap_or_default(),
        ),
    ]);
    let owner = match job.kind {
        WorkloadKind::Pod => None,
        _ => job.owner_reference(),
    };
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(job.namespace.clone()),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_tail_cuts_at_a_line_and_a_char_boundary() {
        assert_eq!(keep_tail(b"one\ntwo\nthree\n", 100), "one\ntwo\nthree\n");
        assert_eq!(keep_tail(b"one\ntwo\nthree\n", 9), "three\n");
        assert_eq!(keep_tail("aéé".as_bytes(), 3), "é");
        assert_eq!(keep_tail(b"abcdef", 3), "def");
        assert_eq!(keep_tail(b"abc", 0), "");
        assert!(keep_tail(&[0xff; 10], 4).len() <= 4);
    }

    #[test]
    fn fit_shares_the_budget_and_keeps_short_logs_whole() {
        let mut notes = Vec::new();
        let logs = vec![
            ("big".to_string(), vec![b'x'; 10_000]),
            ("small".to_string(), b"ok\n".to_vec()),
            ("mid".to_string(), vec![b'y'; 700]),
        ];
        let (data, truncated) = fit(logs, 2000, &mut notes);
        let total: usize = data.values().map(String::len).sum();
        assert!(total <= 2000, "{total}");
        assert_eq!(data["small"], "ok\n");
        assert_eq!(data["mid"].len(), 700);
        assert!(data["big"].len() > 900, "the long log gets the rest");
        assert_eq!(truncated, 1);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("big: kept the last"));
    }

    #[test]
    fn config_map_names_stay_valid() {
        let now = DateTime::from_timestamp(1_764_500_000, 0).expect("time");
        assert_eq!(config_map_name("bert", now), "rebound-logs-bert-1764500000");
        let long = "a".repeat(253);
        assert_eq!(config_map_name(&long, now).len(), 253);
    }
}
