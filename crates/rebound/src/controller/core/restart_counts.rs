//! What an in-place restart costs a Job's `backoffLimit`. A pod template
//! with `restartPolicy: OnFailure` makes the Job controller count every
//! container restart of its running pods against `backoffLimit` ("the
//! number of retries in all the containers of Pods with status.phase
//! Pending or Running", Kubernetes' Job documentation), and an in-place
//! restart restarts every container of every pod: a restart that pushes
//! the count to the limit fails the Job (and a JobSet's child Job, whose
//! default limit of 6 is below the parallelism of most training jobs).
//! Pods with `restartPolicy: Never` count only when they fail, which an
//! in-place restart avoids.

use super::Core;
use super::store::JobKey;
use crate::api::WorkloadKind;
use serde_json::Value;

/// A Job (or a JobSet's replicated Job) whose pods' container restarts
/// count against its `backoffLimit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedRestarts {
    /// The replicated Job of a JobSet whose children this is; `None` for a
    /// batch Job.
    pub replicated_job: Option<String>,
    /// Its `backoffLimit` (the Job controller's default, 6, when unset).
    pub backoff_limit: i64,
}

/// The label the Job controller puts on its pods: their Job's name.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// JobSet's label of a pod's replicated Job.
const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// The Jobs of a job object whose container restarts are counted.
pub fn counted_restarts(kind: WorkloadKind, data: &Value) -> Vec<CountedRestarts> {
    let counted = |job_spec: &Value| {
        (job_spec["template"]["spec"]["restartPolicy"].as_str() == Some("OnFailure"))
            .then(|| job_spec["backoffLimit"].as_i64().unwrap_or(6))
    };
    match kind {
        WorkloadKind::Job => counted(&data["spec"])
            .map(|backoff_limit| CountedRestarts {
                replicated_job: None,
                backoff_limit,
            })
            .into_iter()
            .collect(),
        WorkloadKind::JobSet => data["spec"]["replicatedJobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|rj| {
                counted(&rj["template"]["spec"]).map(|backoff_limit| CountedRestarts {
                    replicated_job: rj["name"].as_str().map(str::to_string),
                    backoff_limit,
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Core {
    /// Why an in-place restart of the job would fail one of its Jobs by
    /// their own `backoffLimit`, if it would.
    pub(super) fn in_place_exhausts(&self, key: &JobKey) -> Option<String> {
        let info = self.store.restart_info(key)?;
        if info.counted_restarts.is_empty() {
            return None;
        }
        let pods = self.store.job_pods(key);
        for c in &info.counted_restarts {
            // Each child Job counts its own pods.
            let mut by_job: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
            for p in pods.iter().filter(|p| !p.deleting) {
                if c.replicated_job
                    .as_deref()
                    .is_some_and(|rj| p.labels.get(REPLICATED_JOB_LABEL).map(|v| &**v) != Some(rj))
                {
                    continue;
                }
                let job = p.labels.get(JOB_NAME_LABEL).map(|v| &**v).unwrap_or("");
                let e = by_job.entry(job).or_default();
                e.0 += i64::from(p.restarts);
                e.1 += i64::from(p.container_count);
            }
            for (job, (used, cost)) in by_job {
                if used + cost >= c.backoff_limit {
                    let which = match (&c.replicated_job, job) {
                        (Some(rj), "") => format!("the Jobs of replicated job {rj}"),
                        (_, "") => "the Job".to_string(),
                        (_, j) => format!("Job {j}"),
                    };
                    return Some(format!(
                        "not in place: it restarts {cost} containers, and {which} counts container restarts against its backoffLimit {} ({used} so far; restartPolicy OnFailure): the Job would fail",
                        c.backoff_limit
                    ));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_on_failure_templates_count_and_the_default_limit_is_six() {
        let job = |policy: &str, limit: Option<i64>| {
            let mut spec = json!({"template": {"spec": {"restartPolicy": policy}}});
            if let Some(l) = limit {
                spec["backoffLimit"] = json!(l);
            }
            json!({ "spec": spec })
        };
        assert_eq!(
            counted_restarts(WorkloadKind::Job, &job("OnFailure", None)),
            vec![CountedRestarts {
                replicated_job: None,
                backoff_limit: 6
            }]
        );
        assert!(counted_restarts(WorkloadKind::Job, &job("Never", Some(1))).is_empty());
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "workers", "template": {"spec": {"backoffLimit": 2,
                "template": {"spec": {"restartPolicy": "OnFailure"}}}}},
            {"name": "driver", "template": {"spec": {
                "template": {"spec": {"restartPolicy": "Never"}}}}}]}});
        assert_eq!(
            counted_restarts(WorkloadKind::JobSet, &js),
            vec![CountedRestarts {
                replicated_job: Some("workers".into()),
                backoff_limit: 2
            }]
        );
        assert!(counted_restarts(WorkloadKind::VolcanoJob, &js).is_empty());
    }
}
