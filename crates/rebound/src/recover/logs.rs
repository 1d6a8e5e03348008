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
/// What the API server accepts in one ConfigMap's data, keys and values
/// together (`MaxSecretSize`, 1 MiB, applies to ConfigMaps too).
pub const CONFIG_MAP_LIMIT: usize = 1024 * 1024;
/// Kept free below [`CONFIG_MAP_LIMIT`]: text made valid UTF-8 may grow,
/// and a limit hit exactly loses every log of the save.
pub const CONFIG_MAP_HEADROOM: usize = 64 * 1024;
/// Log saves (of different jobs) in flight at once: each holds at most one
/// container's bounded log plus its ConfigMap (under 1 MiB), so the
/// controller's memory for saved logs is bounded by this many MiB (times
/// two) whatever the tenants' `preserveLogs` say.
pub const LOG_SAVES_AT_ONCE: usize = 2;

/// Log reads of one save in flight at once. A restart deletes its pods
/// right before the save starts; a pod whose containers exit at once on
/// SIGTERM is gone from the API server within a second or two, so its log
/// must be read within that time: one read after another (a few tens of
/// milliseconds each) lost most logs of a 256-pod job (issue 32 item 7).
/// Each read is bounded by its share of the save's bytes, so memory stays
/// bounded by the save's ConfigMap however many run at once.
pub const READS_AT_ONCE: usize = 32;

/// The gate behind [`LOG_SAVES_AT_ONCE`].
static LOG_SAVES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(LOG_SAVES_AT_ONCE);

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
    /// Logs saved (a container's current or previous instance each).
    pub saved: usize,
    /// Logs that could not be read (also listed in the ConfigMap).
    pub failures: usize,
    /// Why the first of them could not be read.
    pub first_failure: Option<String>,
    pub requests: u32,
}

impl LogsOutcome {
    /// The `LogsPreserved` note: what was saved and what was not, and
    /// whether that is a Warning (any log lost).
    pub fn note(&self, tail_lines: u32, pods: usize) -> (String, bool) {
        let cm = &self.config_map;
        match (self.saved, self.failures) {
            (s, 0) => (
                format!(
                    "Saved the last {tail_lines} log lines of {s} log(s) of {pods} pod(s) in ConfigMap {cm}"
                ),
                false,
            ),
            (0, f) => (
                format!(
                    "Saved no logs of {pods} pod(s): all {f} read(s) failed (first: {}); ConfigMap {cm} lists why under {NOTES_KEY}",
                    self.first_failure.as_deref().unwrap_or("unknown")
                ),
                true,
            ),
            (s, f) => (
                format!(
                    "Saved the last {tail_lines} log lines of {s} log(s) of {pods} pod(s) in ConfigMap {cm}; {f} could not be read (first: {}), listed there under {NOTES_KEY}",
                    self.first_failure.as_deref().unwrap_or("unknown")
                ),
                true,
            ),
        }
    }
}

/// Save the last `tail_lines` lines of each container of `pods` (and of the
/// previous instance of restarted ones) into a new ConfigMap
/// `rebound-logs-<job>-<unix time>` in the job's namespace, one key per log
/// (`<pod>.<container>` and `<pod>.<container>.previous`).
///
/// Bounded in memory whatever a tenant asks (`tailLines`, `maxBytes`, a
/// job of many pods): the logs are read one at a time, each with a
/// `limitBytes` of its share on the request (the server sends no more, and
/// the reader keeps no more if it did); the values total at most
/// `max_bytes`, and never more than [`CONFIG_MAP_LIMIT`] less
/// [`CONFIG_MAP_HEADROOM`] and the keys. Logs shorter than their share
/// leave the rest to the following ones. A log longer than its share is
/// read a second time with as many `tailLines` as fit in the share by the
/// first read's lines, so what is kept is its tail; the truncation is
/// noted. At most [`LOG_SAVES_AT_ONCE`] saves run at once. Each read waits
/// at most `LOG_READ_TIMEOUT`, all together `LOGS_TOTAL_TIMEOUT`. A read
/// that fails or times out is noted under `_notes` and the rest is saved:
/// only the ConfigMap create can fail the call, and the caller restarts
/// anyway.
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
    // Closed never: the semaphore is a static that nothing closes.
    let _turn = LOG_SAVES.acquire().await.ok();
    let api: Api<Pod> = Api::namespaced(client.clone(), &job.namespace);
    let deadline = Instant::now() + LOGS_TOTAL_TIMEOUT;
    let reads: Vec<(String, String, String, bool)> = pods
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
            (key, p.name.clone(), c.clone(), previous)
        })
        .collect();
    let keys: usize = reads.iter().map(|r| r.0.len()).sum::<usize>() + NOTES_KEY.len();
    let cap = data_budget(max_bytes, keys);
    let total = reads.len();
    // Every read gets an equal share up front (reads run side by side, so
    // what one leaves unused is not handed on).
    let share = cap.saturating_sub(notes_room(total, cap)) / total.max(1);
    let mut requests = 0u32;
    let mut data = BTreeMap::new();
    let mut notes = Vec::new();
    let mut failures = 0;
    let mut first_failure = None;
    let mut truncated = 0;
    let results = futures::stream::iter(reads)
        .map(|(key, pod, container, previous)| {
            let api = api.clone();
            async move {
                if Instant::now() >= deadline {
                    let spent = format!("{LOGS_TOTAL_TIMEOUT:?} for all logs spent");
                    return (key, LogRead::Failed(spent), 0);
                }
                let lp = LogParams {
                    container: Some(container),
                    tail_lines: Some(i64::from(tail_lines)),
                    previous,
                    ..LogParams::default()
                };
                let limit = deadline.min(Instant::now() + LOG_READ_TIMEOUT);
                let mut n = 0u32;
                let read = read_tail(&api, &pod, lp, share, &mut n);
                let result = match tokio::time::timeout_at(limit, read).await {
                    Ok(r) => r,
                    Err(_) => LogRead::Failed("timed out".to_string()),
                };
                (key, result, n)
            }
        })
        // In order: the root-cause pod's log is looked at first.
        .buffered(READS_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    for (key, result, n) in results {
        requests += n;
        match result {
            LogRead::Text { bytes, cut } => {
                let text = keep_tail(&bytes, share);
                if cut || text.len() < bytes.len() {
                    truncated += 1;
                    notes.push(format!(
                        "{key}: longer than its share: kept {} bytes",
                        text.len()
                    ));
                }
                data.insert(key, text);
            }
            LogRead::NoPrevious => {}
            LogRead::Failed(e) => {
                failures += 1;
                first_failure.get_or_insert_with(|| format!("{key}: {e}"));
                notes.push(format!("{key}: not saved: {e}"));
            }
        }
    }
    if !notes.is_empty() {
        notes.sort();
        let mut text = notes.join("\n");
        text.push('\n');
        let room = cap.saturating_sub(data.values().map(String::len).sum::<usize>());
        data.insert(NOTES_KEY.to_string(), keep_tail(text.as_bytes(), room));
    }
    tracing::debug!(job = %job.id(), logs = data.len(), truncated, failures, "saving logs");

    let saved = data.keys().filter(|k| k.as_str() != NOTES_KEY).count();
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
        saved,
        failures,
        first_failure,
        requests,
    })
}

/// What the values of a log ConfigMap may total: `max_bytes`, within what
/// the API server accepts less headroom and the `keys`.
fn data_budget(max_bytes: u32, keys: usize) -> usize {
    (max_bytes as usize).min(
        CONFIG_MAP_LIMIT
            .saturating_sub(CONFIG_MAP_HEADROOM)
            .saturating_sub(keys),
    )
}

/// The result of one log read.
enum LogRead {
    /// At most the share; `cut` when the log had more.
    Text {
        bytes: Vec<u8>,
        cut: bool,
    },
    /// No previous instance (the API server's 400 for `previous=true`).
    NoPrevious,
    Failed(String),
}

/// The tail of one log within `share` bytes. The API's `limitBytes` keeps
/// the head of what `tailLines` selects, so a log that fills its share is
/// read once more with only as many lines as fitted the first time: its
/// tail, when its lines are alike in length. Never holds more than `share`
/// bytes plus one chunk.
async fn read_tail(
    api: &Api<Pod>,
    pod: &str,
    mut lp: LogParams,
    share: usize,
    requests: &mut u32,
) -> LogRead {
    if share == 0 {
        return LogRead::Text {
            bytes: Vec::new(),
            cut: true,
        };
    }
    lp.limit_bytes = Some(i64::try_from(share).unwrap_or(i64::MAX));
    *requests += 1;
    let (first, cut) = match read_log(api, pod, &lp, share).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    if !cut {
        return LogRead::Text {
            bytes: first,
            cut: false,
        };
    }
    let lines = first.iter().filter(|&&b| b == b'\n').count();
    let asked = lp.tail_lines.unwrap_or(i64::MAX);
    let fit = i64::try_from(lines).unwrap_or(i64::MAX);
    if fit == 0 || fit >= asked {
        return LogRead::Text {
            bytes: first,
            cut: true,
        };
    }
    drop(first);
    lp.tail_lines = Some(fit);
    *requests += 1;
    match read_log(api, pod, &lp, share).await {
        // Fewer lines than asked for, in any case.
        Ok((bytes, _)) => LogRead::Text { bytes, cut: true },
        Err(r) => r,
    }
}

/// One log read, keeping at most `cap` bytes (the head, as `limitBytes`
/// does): the bytes and whether there were more.
async fn read_log(
    api: &Api<Pod>,
    pod: &str,
    lp: &LogParams,
    cap: usize,
) -> Result<(Vec<u8>, bool), LogRead> {
    let mut stream = match api.log_stream(pod, lp).await {
        Ok(s) => s,
        Err(e) if lp.previous && api_code(&e) == Some(400) => return Err(LogRead::NoPrevious),
        Err(e) => return Err(LogRead::Failed(e.to_string())),
    };
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; (64 * 1024).min(cap + 1)];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            Err(e) => return Err(LogRead::Failed(e.to_string())),
        };
        if n == 0 {
            break;
        }
        let room = cap - buf.len();
        if n > room {
            // More than the share: the server ignored limitBytes, or the
            // log is exactly as long. Stop reading either way.
            buf.extend_from_slice(&chunk[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let cut = buf.len() >= cap;
    Ok((buf, cut))
}

/// Bytes held back for the notes: a line per log (failed or truncated),
/// at most an eighth of the budget.
fn notes_room(logs: usize, cap: usize) -> usize {
    (logs * 96).min(cap / 8)
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

/// Most bytes of the [`NODES_ANNOTATION`]: an object's annotations hold
/// at most 256 KiB together, and a job of thousands of pods would exceed
/// them (the ConfigMap, logs and all, refused).
pub const NODES_ANNOTATION_MAX: usize = 64 * 1024;

/// The pod → node JSON map, as many pods (in name order) as fit in
/// [`NODES_ANNOTATION_MAX`].
fn nodes_annotation(pods: &[PodLogTarget]) -> String {
    let mut nodes: BTreeMap<&str, &str> = BTreeMap::new();
    let mut size = 2;
    let mut sorted: Vec<(&str, &str)> = pods
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.node.as_deref()?)))
        .collect();
    sorted.sort_unstable();
    for (pod, node) in sorted {
        // `"pod":"node",` with room for JSON escapes.
        let entry = 2 * (pod.len() + node.len()) + 6;
        if size + entry > NODES_ANNOTATION_MAX {
            break;
        }
        size += entry;
        nodes.insert(pod, node);
    }
    serde_json::to_string(&nodes).unwrap_or_default()
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
    let annotations = BTreeMap::from([
        (JOB_LABEL.to_string(), job.id()),
        (NODES_ANNOTATION.to_string(), nodes_annotation(pods)),
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
mod tests;
