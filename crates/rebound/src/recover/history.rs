//! Restart records kept in annotations on the job, so cooldowns and restart
//! budgets survive an operator restart or fail-over (DESIGN.md §5).

use super::error::{RecoverError, api_code, api_error};
use super::tally::RESTART_TALLY_ANNOTATION;
use crate::policy::RestartRecord;
use crate::workload::JobRef;
use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Restarts made by rebound over the job's life.
pub const RESTART_COUNT_ANNOTATION: &str = "rebound.dev/restart-count";
/// The last restart's time, RFC 3339.
pub const LAST_RESTART_ANNOTATION: &str = "rebound.dev/last-restart";
/// JSON list of the last `HISTORY_LEN` restarts, oldest first; older ones
/// are kept, as far as a restart budget may count them, in the compact
/// [`RESTART_TALLY_ANNOTATION`].
pub const RESTART_HISTORY_ANNOTATION: &str = "rebound.dev/restart-history";
/// The pod named as root cause of the last restart (absent when unknown).
pub const ROOT_CAUSE_ANNOTATION: &str = "rebound.dev/root-cause";
/// The record time (Unix milliseconds) of the last restart whose ending
/// (`JobResumed` or `JobNotResumed`) rebound told.
pub const RESTART_ENDED_ANNOTATION: &str = "rebound.dev/restart-ended";
/// How many restarts the history keeps (the policy's own bound, which
/// budgets are checked against).
pub const HISTORY_LEN: usize = crate::policy::KEPT_RESTARTS;

/// Attempts of the resourceVersion-guarded patch before giving up (a job
/// operator rewriting the job's status during its restart conflicts often).
const ATTEMPTS: u32 = 6;

/// The restart history in the job's annotations, oldest first: the tally's
/// older restarts (time and cause only), then the full records. Anyone can
/// edit annotations: garbage (not JSON, not a list, bad entries) is
/// ignored entry by entry, never an error.
pub fn read_history(annotations: &BTreeMap<String, String>) -> Vec<RestartRecord> {
    let mut history = annotations
        .get(RESTART_TALLY_ANNOTATION)
        .map(|raw| super::tally::read(raw))
        .unwrap_or_default();
    if let Some(Ok(Value::Array(items))) = annotations
        .get(RESTART_HISTORY_ANNOTATION)
        .map(|raw| serde_json::from_str::<Value>(raw))
    {
        history.extend(
            items
                .into_iter()
                .filter_map(|v| serde_json::from_value(v).ok()),
        );
    }
    history.sort_by_key(|r| r.at);
    history
}

/// What `record_restart` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordOutcome {
    /// The job's restart count after this restart.
    pub restart_count: u64,
    pub requests: u32,
}

/// Append a restart to the job's records: count, last time, history (the
/// last `HISTORY_LEN`), root cause, in one JSON merge patch of the job's
/// annotations. The patch carries the resourceVersion of `current` (the
/// job's metadata as last seen) so a concurrent writer is not overwritten;
/// on a conflict, or without `current`, the job is read again (up to six
/// attempts, with a short growing pause). One request when `current` is fresh.
pub async fn record_restart(
    client: &Client,
    job: &JobRef,
    record: &RestartRecord,
    root_cause: Option<&str>,
    current: Option<&ObjectMeta>,
) -> Result<RecordOutcome, RecoverError> {
    patch_annotations(client, job, current, |seen| {
        records_patch(seen, record, root_cause)
    })
    .await
}

/// A restart written on the job: the record (appended to the history when
/// `append`), the root cause, and the in-place generation annotations
/// (docs/in-place.md). For an in-place restart this write is what restarts
/// the pods.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordWrite {
    pub record: RestartRecord,
    pub root_cause: Option<String>,
    pub generation: u64,
    pub released: u64,
    /// Append the record (a new restart), or only set the generation
    /// annotations (a fallback within the same restart).
    pub append: bool,
    /// Records to take back (by their `at`), in the same patch: each was
    /// written at once with its restart's delete, and that delete never
    /// went through. Left on the job, one would tell a later leader that
    /// its fault was handled (and the fault would be lost), and count
    /// towards cooldowns and budgets a restart that never happened. With
    /// `append` false and no generation change, only these go.
    pub retract: Vec<DateTime<Utc>>,
}

/// Write `w` on the job in one merge patch, with the job's uid in the patch
/// (a job recreated under the same name since the decision answers 422:
/// `uid` is immutable) and the resourceVersion of `current` (a conflict is
/// read again and retried, up to six attempts).
pub async fn write_record(
    client: &Client,
    job: &JobRef,
    w: &RecordWrite,
    current: Option<&ObjectMeta>,
) -> Result<RecordOutcome, RecoverError> {
    patch_annotations(client, job, current, |seen| {
        record_write_patch(seen, w, job.uid.as_deref())
    })
    .await
}

/// The merge patch of [`write_record`] for a job whose metadata is `seen`,
/// and the restart count after it: the record appended (when `w.append`),
/// the generation annotations, the resourceVersion of `seen` and the job's
/// `uid` as preconditions.
pub fn record_write_patch(seen: &ObjectMeta, w: &RecordWrite, uid: Option<&str>) -> (Value, u64) {
    if !w.append && !w.retract.is_empty() {
        let (mut patch, count) = history_patch(seen, None, None, &w.retract);
        if let Some(uid) = uid {
            patch["metadata"]["uid"] = json!(uid);
        }
        return (patch, count);
    }
    let (mut patch, restart_count) = if w.append {
        history_patch(seen, Some(&w.record), w.root_cause.as_deref(), &w.retract)
    } else {
        let mut m = json!({"metadata": {"annotations": {}}});
        if let Some(rv) = &seen.resource_version {
            m["metadata"]["resourceVersion"] = json!(rv);
        }
        (m, 0)
    };
    let g = crate::inplace::Generation {
        current: w.generation,
        released: w.released,
    };
    // A merge patch of the patch's own metadata: the generation's
    // annotations and label join the record's (no nulls among them).
    json_patch::merge(&mut patch["metadata"], &g.metadata_patch());
    if let Some(uid) = uid {
        patch["metadata"]["uid"] = json!(uid);
    }
    (patch, restart_count)
}

/// Lift the in-place barrier of `generation`, only while it is the job's
/// current generation: a release decided for an older generation (a
/// retry, a replica of an earlier leadership term) must never lower
/// `restart-released` below a newer one, nor release a newer restart's
/// barrier before its pods wait at it.
///
/// One JSON patch that tests the job's uid and generation annotation, then
/// sets the released annotation and the state label. When it is refused
/// (422: a test failed, or the job has no labels to add to), the job is
/// read: another generation is [`RecoverError::Superseded`], otherwise one
/// merge patch with the read resourceVersion as precondition.
pub async fn release(client: &Client, job: &JobRef, generation: u64) -> Result<(), RecoverError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &job.namespace, &job.api_resource());
    let what = "json-patch the job's restart-released (tested against its generation)";
    let patch = release_json_patch(job.uid.as_deref(), generation);
    let first = api
        .patch(
            &job.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await;
    match first {
        Ok(_) => return Ok(()),
        Err(e) if api_code(&e) != Some(422) => return Err(api_error(&job.id(), what, 1)(e)),
        Err(_) => {}
    }
    let seen = api.get(&job.name).await.map_err(api_error(
        &job.id(),
        "get the job to release its barrier",
        2,
    ))?;
    if let (Some(want), Some(have)) = (&job.uid, &seen.metadata.uid)
        && want != have
    {
        return Err(RecoverError::Superseded {
            target: job.id(),
            request: "release".into(),
            why: format!("the job was recreated (uid {have}, decided for {want})"),
            requests: 2,
        });
    }
    let g = crate::inplace::Generation::from_annotations(
        seen.metadata
            .annotations
            .as_ref()
            .unwrap_or(&BTreeMap::new()),
    );
    if g.current != generation {
        return Err(RecoverError::Superseded {
            target: job.id(),
            request: "release".into(),
            why: format!("generation {generation} superseded by {}", g.current),
            requests: 2,
        });
    }
    if g.released >= generation {
        return Ok(());
    }
    let mut patch = json!({
        "metadata": crate::inplace::Generation::release_patch(generation),
    });
    patch["metadata"]["resourceVersion"] = json!(seen.metadata.resource_version);
    if let Some(uid) = &job.uid {
        patch["metadata"]["uid"] = json!(uid);
    }
    api.patch(&job.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(api_error(
            &job.id(),
            "merge-patch the job's restart-released (resourceVersion precondition)",
            3,
        ))
}

/// The JSON patch of [`release`]: tests of the uid and the generation,
/// then the released annotation and the state label.
pub fn release_json_patch(uid: Option<&str>, generation: u64) -> json_patch::Patch {
    let esc = |k: &str| k.replace('~', "~0").replace('/', "~1");
    let g = generation.to_string();
    let mut ops = Vec::new();
    if let Some(uid) = uid {
        ops.push(json!({"op": "test", "path": "/metadata/uid", "value": uid}));
    }
    ops.push(json!({"op": "test",
        "path": format!("/metadata/annotations/{}", esc(crate::inplace::GENERATION_ANNOTATION)),
        "value": g}));
    ops.push(json!({"op": "add",
        "path": format!("/metadata/annotations/{}", esc(crate::inplace::RELEASED_ANNOTATION)),
        "value": g}));
    ops.push(json!({"op": "add",
        "path": format!("/metadata/labels/{}", esc(crate::inplace::STATE_LABEL)),
        "value": format!("{generation}-{generation}")}));
    serde_json::from_value(Value::Array(ops)).unwrap_or_else(|_| json_patch::Patch(Vec::new()))
}

/// The merge patch that appends `record` to the records in `seen`, and the
/// new restart count.
fn records_patch(
    seen: &ObjectMeta,
    record: &RestartRecord,
    root_cause: Option<&str>,
) -> (Value, u64) {
    history_patch(seen, Some(record), root_cause, &[])
}

/// The merge patch of the job's restart history and the restart count
/// after it: `retract` taken out (records of restarts never made), then
/// `record` appended, the oldest beyond [`HISTORY_LEN`] kept in the tally.
/// A record already there (a retry after a lost answer) is not appended,
/// nor counted, twice; with nothing to append or take back nothing but the
/// resourceVersion precondition is patched.
fn history_patch(
    seen: &ObjectMeta,
    record: Option<&RestartRecord>,
    root_cause: Option<&str>,
    retract: &[DateTime<Utc>],
) -> (Value, u64) {
    let empty = BTreeMap::new();
    let annotations = seen.annotations.as_ref().unwrap_or(&empty);
    let mut history = read_history(annotations);
    let previous = annotations
        .get(RESTART_COUNT_ANNOTATION)
        .and_then(|c| c.trim().parse::<u64>().ok())
        .unwrap_or(history.len() as u64);
    let mut metadata = json!({"annotations": {}});
    if let Some(rv) = &seen.resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    let written = record.is_some_and(|record| {
        history
            .iter()
            .any(|r| r.at == record.at && r.generation == record.generation)
    });
    let before = history.len();
    history.retain(|r| !retract.contains(&r.at));
    let removed = (before - history.len()) as u64;
    let record = record.filter(|_| !written);
    if record.is_none() && removed == 0 {
        return (json!({ "metadata": metadata }), previous);
    }
    if let Some(record) = record {
        history.push(record.clone());
    }
    history.sort_by_key(|r| r.at);
    let newest = history.last().map(|r| r.at);
    let excess = history.len().saturating_sub(HISTORY_LEN);
    let older: Vec<RestartRecord> = history.drain(..excess).collect();
    let tally = super::tally::write(&older, newest.unwrap_or(DateTime::<Utc>::UNIX_EPOCH));
    let count = previous
        .saturating_sub(removed)
        .saturating_add(u64::from(record.is_some()));
    let mut a = json!({
        RESTART_COUNT_ANNOTATION: count.to_string(),
        LAST_RESTART_ANNOTATION: newest.map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
        RESTART_HISTORY_ANNOTATION: serde_json::to_string(&history).unwrap_or_else(|_| "[]".into()),
        RESTART_TALLY_ANNOTATION: tally,
    });
    if record.is_some() {
        a[ROOT_CAUSE_ANNOTATION] = json!(root_cause);
    }
    metadata["annotations"] = a;
    (json!({ "metadata": metadata }), count)
}

/// One JSON merge patch of the job's annotations, built by `build` from its
/// metadata as last seen (`current`, else read) and carrying that
/// resourceVersion; on a conflict the job is read again (up to
/// `ATTEMPTS`, with a short growing pause).
async fn patch_annotations(
    client: &Client,
    job: &JobRef,
    current: Option<&ObjectMeta>,
    build: impl Fn(&ObjectMeta) -> (serde_json::Value, u64),
) -> Result<RecordOutcome, RecoverError> {
    let id = job.id();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &job.namespace, &job.api_resource());
    let mut requests = 0;
    let mut meta = current.cloned();
    for _ in 0..ATTEMPTS {
        let seen = match meta.take() {
            Some(m) => m,
            None => {
                requests += 1;
                api.get(&job.name)
                    .await
                    .map_err(api_error(&id, "get the job", requests))?
                    .metadata
            }
        };
        let (patch, restart_count) = build(&seen);
        requests += 1;
        match api
            .patch(&job.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                return Ok(RecordOutcome {
                    restart_count,
                    requests,
                });
            }
            Err(e) if api_code(&e) == Some(409) => {
                tokio::time::sleep(std::time::Duration::from_millis(10 * u64::from(requests)))
                    .await;
                continue;
            }
            Err(e) => {
                return Err(api_error(
                    &id,
                    "merge-patch the job's annotations",
                    requests,
                )(e));
            }
        }
    }
    Err(RecoverError::Conflict {
        target: id,
        request: "merge-patch the job's annotations".into(),
        attempts: ATTEMPTS,
        requests,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn at(s: i64) -> RestartRecord {
        RestartRecord {
            at: Utc.timestamp_opt(s, 0).single().expect("valid time"),
            infrastructure: s % 2 == 0,
            pod_only: false,
            ..Default::default()
        }
    }

    fn annotated(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn garbage_is_ignored_entry_by_entry() {
        for raw in [
            "",
            "null",
            "{}",
            "[",
            "\"x\"",
            "[1, 2]",
            "[{\"at\": \"yesterday\"}]",
        ] {
            assert!(
                read_history(&annotated(&[(RESTART_HISTORY_ANNOTATION, raw)])).is_empty(),
                "{raw}"
            );
        }
        let mixed =
            r#"[{"at":"2026-01-01T00:00:10Z","podOnly":true}, 7, {"at":"2026-01-01T00:00:05Z"}]"#;
        let h = read_history(&annotated(&[(RESTART_HISTORY_ANNOTATION, mixed)]));
        assert_eq!(h.len(), 2);
        assert!(h[0].at < h[1].at, "sorted oldest first");
        assert!(h[1].pod_only);
    }

    #[test]
    fn a_record_write_carries_the_generation_and_its_label_with_the_record() {
        use crate::inplace::{GENERATION_ANNOTATION, RELEASED_ANNOTATION, STATE_LABEL};
        let meta = ObjectMeta {
            resource_version: Some("9".into()),
            ..ObjectMeta::default()
        };
        let w = RecordWrite {
            record: at(1000),
            root_cause: None,
            generation: 3,
            released: 2,
            append: true,
            retract: Vec::new(),
        };
        let (patch, count) = record_write_patch(&meta, &w, Some("uid-1"));
        assert_eq!(count, 1);
        let m = &patch["metadata"];
        assert_eq!(m["annotations"][GENERATION_ANNOTATION], "3");
        assert_eq!(m["annotations"][RELEASED_ANNOTATION], "2");
        assert_eq!(m["annotations"][RESTART_COUNT_ANNOTATION], "1");
        assert_eq!(
            m["annotations"].get(ROOT_CAUSE_ANNOTATION),
            Some(&Value::Null),
            "no root cause: the merge patch clears an old one"
        );
        assert_eq!(m["labels"][STATE_LABEL], "3-2", "the agents' watch key");
        assert_eq!(
            (&m["uid"], &m["resourceVersion"]),
            (&"uid-1".into(), &"9".into())
        );
        // A fallback within the same restart: no record, the new state.
        let w = RecordWrite {
            released: 3,
            append: false,
            ..w
        };
        let (patch, _) = record_write_patch(&meta, &w, None);
        assert_eq!(patch["metadata"]["labels"][STATE_LABEL], "3-3");
        assert!(patch["metadata"]["annotations"][RESTART_COUNT_ANNOTATION].is_null());
    }

    #[test]
    fn a_record_of_a_restart_never_made_is_taken_back() {
        let two = serde_json::to_string(&[at(10), at(20)]).unwrap_or_default();
        let meta = ObjectMeta {
            resource_version: Some("7".into()),
            annotations: Some(annotated(&[
                (RESTART_HISTORY_ANNOTATION, &two),
                (RESTART_COUNT_ANNOTATION, "2"),
            ])),
            ..ObjectMeta::default()
        };
        let take_back = RecordWrite {
            record: at(20),
            root_cause: None,
            generation: 1,
            released: 1,
            append: false,
            retract: vec![at(20).at],
        };
        let (patch, count) = record_write_patch(&meta, &take_back, None);
        assert_eq!(count, 1);
        let a = &patch["metadata"]["annotations"];
        assert_eq!(a[RESTART_COUNT_ANNOTATION], "1");
        let kept: Vec<RestartRecord> =
            serde_json::from_str(a[RESTART_HISTORY_ANNOTATION].as_str().unwrap_or(""))
                .unwrap_or_default();
        assert_eq!(
            kept.iter().map(|r| r.at).collect::<Vec<_>>(),
            vec![at(10).at]
        );
        assert!(
            a.get(crate::inplace::GENERATION_ANNOTATION).is_none(),
            "taking back changes no generation"
        );
        // Taken back already (a retry): nothing but the precondition.
        let gone = ObjectMeta {
            annotations: Some(annotated(&[(RESTART_HISTORY_ANNOTATION, "[]")])),
            ..meta.clone()
        };
        let (patch, _) = record_write_patch(&gone, &take_back, None);
        assert_eq!(patch["metadata"]["annotations"], json!({}));
        // The next record takes it back in the same patch: one restart
        // added, one taken back.
        let next = RecordWrite {
            record: at(30),
            append: true,
            ..take_back
        };
        let (patch, count) = record_write_patch(&meta, &next, None);
        assert_eq!(count, 2);
        let h: Vec<RestartRecord> = serde_json::from_str(
            patch["metadata"]["annotations"][RESTART_HISTORY_ANNOTATION]
                .as_str()
                .unwrap_or(""),
        )
        .unwrap_or_default();
        assert_eq!(
            h.iter().map(|r| r.at).collect::<Vec<_>>(),
            vec![at(10).at, at(30).at]
        );
    }

    #[test]
    fn patch_appends_bounds_and_counts() {
        let old: Vec<_> = (0..HISTORY_LEN as i64).map(at).collect();
        let meta = ObjectMeta {
            resource_version: Some("42".into()),
            annotations: Some(annotated(&[
                (
                    RESTART_HISTORY_ANNOTATION,
                    &serde_json::to_string(&old).expect("json"),
                ),
                (RESTART_COUNT_ANNOTATION, "57"),
            ])),
            ..ObjectMeta::default()
        };
        let (patch, count) = records_patch(&meta, &at(1000), Some("bert-worker-3"));
        assert_eq!(count, 58);
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let a = &patch["metadata"]["annotations"];
        assert_eq!(a[RESTART_COUNT_ANNOTATION], "58");
        assert_eq!(a[LAST_RESTART_ANNOTATION], "1970-01-01T00:16:40Z");
        assert_eq!(a[ROOT_CAUSE_ANNOTATION], "bert-worker-3");
        let written: BTreeMap<String, String> = [(
            RESTART_HISTORY_ANNOTATION.to_string(),
            a[RESTART_HISTORY_ANNOTATION]
                .as_str()
                .expect("string")
                .to_string(),
        )]
        .into();
        let h = read_history(&written);
        assert_eq!(h.len(), HISTORY_LEN);
        assert_eq!(h.first(), Some(&at(1)));
        assert_eq!(h.last(), Some(&at(1000)));

        // Garbage count: the history length stands in; no root cause clears it.
        let meta = ObjectMeta {
            annotations: Some(annotated(&[(RESTART_COUNT_ANNOTATION, "many")])),
            ..ObjectMeta::default()
        };
        let (patch, count) = records_patch(&meta, &at(5), None);
        assert_eq!(count, 1);
        assert!(patch["metadata"]["annotations"][ROOT_CAUSE_ANNOTATION].is_null());
        assert!(patch["metadata"].get("resourceVersion").is_none());
    }

    /// A budget of 1,000 restarts in 30 days is enforced from what the job
    /// carries: 1,200 restarts written one by one, each on the job as the
    /// previous write left it; the annotations stay within their bound and
    /// the last 30 days' count is exact.
    #[test]
    fn a_thousand_restarts_in_thirty_days_stay_countable_within_the_bound() {
        let mut annotations = BTreeMap::new();
        let base = 1_800_000_000;
        // Every 30 min for 25 days: 1,200 restarts, every third caused by
        // hardware.
        for i in 0..1200i64 {
            let mut r = at(base + 1800 * i);
            r.infrastructure = i % 3 == 0;
            r.occurrence = Some(format!("{i:032x}"));
            let meta = ObjectMeta {
                annotations: Some(annotations.clone()),
                ..ObjectMeta::default()
            };
            let (patch, count) = records_patch(&meta, &r, None);
            assert_eq!(count, i as u64 + 1);
            for (k, v) in patch["metadata"]["annotations"].as_object().expect("map") {
                match v.as_str() {
                    Some(v) => annotations.insert(k.clone(), v.to_string()),
                    None => annotations.remove(k),
                };
            }
        }
        let bytes: usize = [RESTART_HISTORY_ANNOTATION, RESTART_TALLY_ANNOTATION]
            .iter()
            .filter_map(|k| annotations.get(*k))
            .map(String::len)
            .sum();
        assert!(
            bytes <= crate::policy::TALLY_BYTES + 20 * 200,
            "{bytes} bytes"
        );
        let h = read_history(&annotations);
        assert_eq!(h.len(), 1200, "all within the horizon and the bound");
        assert_eq!(h.iter().filter(|r| r.infrastructure).count(), 400);
        assert_eq!(
            h.last().and_then(|r| r.occurrence.clone()),
            Some(format!("{:032x}", 1199))
        );
        // The newest 20 in full, the older ones by time and cause only.
        assert_eq!(
            h.iter().filter(|r| r.occurrence.is_some()).count(),
            HISTORY_LEN
        );
    }
}
