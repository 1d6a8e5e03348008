//! Prometheus metrics of the controller (docs/metrics.md lists them; a test
//! checks that the docs and this file agree).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// Labels `source`, `level`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaultLabels {
    pub source: String,
    pub level: String,
}

/// Labels `action`, `outcome`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub action: String,
    pub outcome: String,
}

/// Label `verb`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: String,
}

/// Label `kind`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Labels `stage`, `action` of the critical-path histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    pub stage: &'static str,
    pub action: &'static str,
}

/// Labels `kind`, `tier` of the time to resume.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResumeLabels {
    pub kind: &'static str,
    pub tier: &'static str,
}

fn resume_histogram() -> Histogram {
    // 0.1 s .. 30 min
    Histogram::new([
        0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
    ])
}

/// The stages of the critical path, in order (docs/critical-path.md).
pub const PATH_STAGES: [&str; 5] = ["read", "queued", "decided", "dispatched", "answered"];

fn path_histogram() -> Histogram {
    // 20 µs .. 0.5 s: the stages are microseconds to milliseconds.
    Histogram::new([
        0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5,
    ])
}

/// Label `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: String,
}

/// Every metric, registered once.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Arc<Registry>,
    pub faults: Family<FaultLabels, Counter>,
    pub decisions: Family<DecisionLabels, Counter>,
    pub reaction: Histogram,
    /// The reaction split into its stages, per action.
    pub path: Family<PathLabels, Histogram, fn() -> Histogram>,
    pub api_requests: Family<VerbLabels, Counter>,
    pub api_errors: Family<VerbLabels, Counter>,
    pub breaker_open: Gauge,
    pub breaker_held: Gauge,
    pub cel_errors: Counter,
    pub parse_errors: Family<KindLabels, Counter>,
    pub leader: Gauge,
    pub watch_restarts: Family<KindLabels, Counter>,
    pub cordoned_nodes: Gauge,
    pub isolated_devices: Gauge,
    pub clusterd_writes: Family<VerbLabels, Counter>,
    pub clusterd_errors: Family<VerbLabels, Counter>,
    pub rank_table_writes: Family<StatusLabels, Counter>,
    pub recovery: Histogram,
    /// By job kind and the tier that brought the job back.
    pub time_to_resume: Family<ResumeLabels, Histogram, fn() -> Histogram>,
    /// Recoveries that ended without the job running again, by kind.
    pub not_resumed: Family<KindLabels, Counter>,
    /// Steps of the recovery core that ran past `--step-timeout`.
    pub steps_stuck: Counter,
    /// How long each step of the recovery core took (every input, not only
    /// those that led to an action): what a flood of inputs costs the one
    /// loop every tenant's recovery goes through.
    pub step: Histogram,
    /// Namespaces whose restart agents rebound could not grant read access
    /// to their jobs (docs/in-place.md).
    pub agent_access_failed: Gauge,
}

/// Metric names, for the docs check.
pub const NAMES: &[&str] = &[
    "rebound_faults_total",
    "rebound_decisions_total",
    "rebound_reaction_seconds",
    "rebound_critical_path_seconds",
    "rebound_api_requests_total",
    "rebound_api_errors_total",
    "rebound_breaker_open",
    "rebound_breaker_held_nodes",
    "rebound_cel_errors_total",
    "rebound_fault_parse_errors_total",
    "rebound_leader",
    "rebound_watch_restarts_total",
    "rebound_cordoned_nodes",
    "rebound_isolated_devices",
    "rebound_clusterd_view_writes_total",
    "rebound_clusterd_view_errors_total",
    "rebound_rank_table_writes_total",
    "rebound_recovery_seconds",
    "rebound_time_to_resume_seconds",
    "rebound_jobs_not_resumed_total",
    "rebound_core_steps_stuck_total",
    "rebound_core_step_seconds",
    "rebound_agent_access_failed_namespaces",
];

/// Families whose series appear with their first sample, not at zero from
/// start-up: by kind and tier, 55 histograms of 13 buckets at zero would be
/// most of the exposition (alerts use `rebound_jobs_not_resumed_total`).
pub const SERIES_ON_FIRST_SAMPLE: &[&str] = &["rebound_time_to_resume_seconds"];

/// `verb` of `rebound_api_requests_total` and `rebound_api_errors_total`.
pub const API_VERBS: [&str; 4] = ["delete", "patch", "patch_status", "action"];
/// `kind` of `rebound_fault_parse_errors_total`: the objects fault data is
/// read from (Events, device-plugin ConfigMaps, rank-table Pods).
pub const PARSE_KINDS: [&str; 3] = ["Event", "ConfigMap", "Pod"];
/// `kind` of `rebound_watch_restarts_total`: the controller's watches
/// (controller/watches.rs; a test checks the names there).
pub const WATCHES: [&str; 12] = [
    "pods",
    "nodes",
    "events",
    "configmaps",
    "policies",
    "classifications",
    "crds",
    "discovery",
    "jobs",
    "resourceslices",
    "resourceclaims",
    "devicetaintrules",
];
/// `action` of the critical-path histogram.
pub const PATH_ACTIONS: [&str; 4] = ["restart_job", "delete_pods", "record", "cordon"];
/// `verb` of the ClusterD view counters.
pub const CLUSTERD_VERBS: [&str; 3] = ["create", "update", "delete"];
/// `status` of `rebound_rank_table_writes_total`.
pub const RANK_TABLE_STATUSES: [&str; 2] = ["initializing", "completed"];

/// The (action, outcome) pairs of `rebound_decisions_total` the controller
/// counts: a job's restart acted, dry run or held by its retry limit; a
/// job's skip before any action (`none`); a node's cordon and uncordon.
pub fn known_decisions() -> Vec<(&'static str, &'static str)> {
    use crate::policy::Skip;
    let mut out = Vec::new();
    for action in ["restart_job", "restart_pod"] {
        for outcome in ["acted", "dry_run", "RetryLimit"] {
            out.push((action, outcome));
        }
    }
    out.push(("restart_job", "NativeInPlace"));
    for s in Skip::NAMES {
        if !Skip::NODE_ONLY.contains(&s) && !matches!(s, "DryRun" | "RetryLimit") {
            out.push(("none", s));
        }
    }
    for outcome in ["acted", "dry_run", "BreakerOpen"] {
        out.push(("cordon", outcome));
    }
    out.push(("uncordon", "acted"));
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Register every metric in a fresh registry.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let faults = Family::<FaultLabels, Counter>::default();
        r.register(
            "rebound_faults",
            "Faults seen, by source and level",
            faults.clone(),
        );
        let decisions = Family::<DecisionLabels, Counter>::default();
        r.register("rebound_decisions", "Decisions by action (restart_job, restart_pod, cordon, taint, none) and outcome (acted, dry_run, a skip reason, error)", decisions.clone());
        // 0.5 ms .. ~4 s
        let reaction = Histogram::new([
            0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 4.0,
        ]);
        r.register(
            "rebound_reaction_seconds",
            "Time from the watch event carrying a fault to the first action request sent",
            reaction.clone(),
        );
        let path: Family<PathLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(path_histogram);
        r.register(
            "rebound_critical_path_seconds",
            "The reaction's stages, by action: read (the watch event turned into the core's input), queued (waiting for the core), decided (the core's step), dispatched (to the request: task start, rate limit, leadership check), answered (the request's round trip)",
            path.clone(),
        );
        let api_requests = Family::<VerbLabels, Counter>::default();
        r.register(
            "rebound_api_requests",
            "API requests made by actions and status writes, by verb",
            api_requests.clone(),
        );
        let api_errors = Family::<VerbLabels, Counter>::default();
        r.register(
            "rebound_api_errors",
            "API requests that failed, by verb",
            api_errors.clone(),
        );
        let breaker_open = Gauge::default();
        r.register(
            "rebound_breaker_open",
            "1 while the node circuit breaker holds separations back",
            breaker_open.clone(),
        );
        let breaker_held = Gauge::default();
        r.register(
            "rebound_breaker_held_nodes",
            "Node separations held back by the breaker",
            breaker_held.clone(),
        );
        let cel_errors = Counter::default();
        r.register(
            "rebound_cel_errors",
            "CEL evaluations that failed (treated as no match)",
            cel_errors.clone(),
        );
        let parse_errors = Family::<KindLabels, Counter>::default();
        r.register(
            "rebound_fault_parse_errors",
            "Objects whose fault data could not be parsed, by kind",
            parse_errors.clone(),
        );
        let leader = Gauge::default();
        r.register(
            "rebound_leader",
            "1 while this replica holds the leader Lease",
            leader.clone(),
        );
        let watch_restarts = Family::<KindLabels, Counter>::default();
        r.register(
            "rebound_watch_restarts",
            "Watch streams that failed and were restarted, by kind",
            watch_restarts.clone(),
        );
        let cordoned_nodes = Gauge::default();
        r.register(
            "rebound_cordoned_nodes",
            "Nodes currently cordoned by rebound",
            cordoned_nodes.clone(),
        );
        let isolated_devices = Gauge::default();
        r.register(
            "rebound_isolated_devices",
            "Devices currently out of scheduling by rebound's DeviceTaintRules",
            isolated_devices.clone(),
        );
        let clusterd_writes = Family::<VerbLabels, Counter>::default();
        r.register(
            "rebound_clusterd_view_writes",
            "ClusterD fault view ConfigMaps written, by verb (create, update, delete)",
            clusterd_writes.clone(),
        );
        let clusterd_errors = Family::<VerbLabels, Counter>::default();
        r.register(
            "rebound_clusterd_view_errors",
            "ClusterD fault view requests that failed (retried next round), by verb",
            clusterd_errors.clone(),
        );
        let rank_table_writes = Family::<StatusLabels, Counter>::default();
        r.register(
            "rebound_rank_table_writes",
            "hccl.json rank tables written, by status (initializing, completed)",
            rank_table_writes.clone(),
        );
        // 0.1 s .. 30 min
        let recovery = Histogram::new([
            0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        ]);
        r.register(
            "rebound_recovery_seconds",
            "Time from a job restart to its rank table completed again",
            recovery.clone(),
        );
        let time_to_resume: Family<ResumeLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(resume_histogram);
        r.register(
            "rebound_time_to_resume_seconds",
            "Time from a fault to every pod of the job it restarted running and Ready again (what the job loses to the fault), by job kind and the tier that brought it back",
            time_to_resume.clone(),
        );
        let not_resumed = Family::<KindLabels, Counter>::default();
        r.register(
            "rebound_jobs_not_resumed",
            "Recoveries that ended without the job running again (its operator gave up, or its pods were not back within the bound), by job kind",
            not_resumed.clone(),
        );
        let steps_stuck = Counter::default();
        r.register(
            "rebound_core_steps_stuck",
            "Steps of the recovery core that ran past --step-timeout (the replica gave its Lease up and failed /healthz while stuck)",
            steps_stuck.clone(),
        );
        // 0.1 ms .. 5 s (the default --step-timeout)
        let step = Histogram::new([
            0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
        ]);
        r.register(
            "rebound_core_step_seconds",
            "Time each step of the recovery core took, one input each (watch events, ticks, results): the one loop every recovery goes through",
            step.clone(),
        );
        let agent_access_failed = Gauge::default();
        r.register(
            "rebound_agent_access_failed_namespaces",
            "Namespaces whose restart agents rebound could not grant read access to their jobs (their RoleBinding was refused; in-place restarts there fall back to recreating pods)",
            agent_access_failed.clone(),
        );
        let m = Metrics {
            registry: Arc::new(r),
            steps_stuck,
            agent_access_failed,
            step,
            time_to_resume,
            not_resumed,
            faults,
            decisions,
            reaction,
            path,
            api_requests,
            api_errors,
            breaker_open,
            breaker_held,
            cel_errors,
            parse_errors,
            leader,
            watch_restarts,
            cordoned_nodes,
            isolated_devices,
            clusterd_writes,
            clusterd_errors,
            rank_table_writes,
            recovery,
        };
        m.create_known_series();
        m
    }

    /// Every labelled series whose label values are known, at zero: a
    /// dashboard or alert written against docs/metrics.md sees them from
    /// start-up, and `increase()` over a counter's first sample is not lost
    /// (a series that appears at 1 shows no increase).
    fn create_known_series(&self) {
        use crate::fault::{FaultSource, Level};
        for source in FaultSource::ALL {
            for level in Level::ALL {
                let _ = self.faults.get_or_create(&FaultLabels {
                    source: source.to_string(),
                    level: level.to_string(),
                });
            }
        }
        for (action, outcome) in known_decisions() {
            let _ = self.decisions.get_or_create(&DecisionLabels {
                action: action.into(),
                outcome: outcome.into(),
            });
        }
        for stage in PATH_STAGES {
            for action in PATH_ACTIONS {
                let _ = self.path.get_or_create(&PathLabels { stage, action });
            }
        }
        for verb in API_VERBS {
            let l = VerbLabels { verb: verb.into() };
            let _ = self.api_requests.get_or_create(&l);
            let _ = self.api_errors.get_or_create(&l);
        }
        for kind in PARSE_KINDS {
            let _ = self
                .parse_errors
                .get_or_create(&KindLabels { kind: kind.into() });
        }
        for kind in WATCHES {
            let _ = self
                .watch_restarts
                .get_or_create(&KindLabels { kind: kind.into() });
        }
        for verb in CLUSTERD_VERBS {
            let l = VerbLabels { verb: verb.into() };
            let _ = self.clusterd_writes.get_or_create(&l);
            let _ = self.clusterd_errors.get_or_create(&l);
        }
        for kind in crate::api::WorkloadKind::ALL {
            let _ = self.not_resumed.get_or_create(&KindLabels {
                kind: kind.as_str().into(),
            });
        }
        for status in RANK_TABLE_STATUSES {
            let _ = self.rank_table_writes.get_or_create(&StatusLabels {
                status: status.into(),
            });
        }
    }

    /// Count one ClusterD view write.
    pub fn clusterd_write(&self, verb: &str) {
        self.clusterd_writes
            .get_or_create(&VerbLabels { verb: verb.into() })
            .inc();
    }

    /// Count one failed ClusterD view request.
    pub fn clusterd_error(&self, verb: &str) {
        self.clusterd_errors
            .get_or_create(&VerbLabels { verb: verb.into() })
            .inc();
    }

    /// Count one decision.
    pub fn decision(&self, action: &str, outcome: &str) {
        self.decisions
            .get_or_create(&DecisionLabels {
                action: action.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Count one API request (and its failure).
    pub fn request(&self, verb: &str, ok: bool) {
        let l = VerbLabels {
            verb: verb.to_string(),
        };
        self.api_requests.get_or_create(&l).inc();
        if !ok {
            self.api_errors.get_or_create(&l).inc();
        }
    }

    /// One stage of an action's critical path.
    pub fn path_stage(&self, stage: &'static str, action: &'static str, d: std::time::Duration) {
        self.path
            .get_or_create(&PathLabels { stage, action })
            .observe(d.as_secs_f64());
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        if prometheus_client::encoding::text::encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_and_its_known_label_values_exist_at_zero_from_the_start() {
        let text = Metrics::new().encode();
        // By kind and tier: 55 histograms of 13 buckets at zero would be
        // most of the exposition; a histogram's series appears with its
        // first sample (docs/metrics.md says so), alerts use the counter.
        for name in NAMES
            .iter()
            .filter(|n| **n != "rebound_time_to_resume_seconds")
        {
            assert!(
                text.lines().any(|l| l.starts_with(name)),
                "{name} has no sample at start-up"
            );
        }
        for line in [
            r#"rebound_faults_total{source="NvidiaXid",level="Separate"} 0"#,
            r#"rebound_faults_total{source="Hang",level="Ignore"} 0"#,
            r#"rebound_decisions_total{action="restart_job",outcome="acted"} 0"#,
            r#"rebound_decisions_total{action="none",outcome="BudgetExhausted"} 0"#,
            r#"rebound_decisions_total{action="cordon",outcome="BreakerOpen"} 0"#,
            r#"rebound_api_errors_total{verb="delete"} 0"#,
            r#"rebound_watch_restarts_total{kind="pods"} 0"#,
            r#"rebound_jobs_not_resumed_total{kind="TrainJob"} 0"#,
            r#"rebound_fault_parse_errors_total{kind="Event"} 0"#,
            r#"rebound_clusterd_view_errors_total{verb="update"} 0"#,
            r#"rebound_rank_table_writes_total{status="completed"} 0"#,
            r#"rebound_critical_path_seconds_count{stage="answered",action="cordon"} 0"#,
        ] {
            assert!(text.contains(line), "no `{line}` at start-up");
        }
    }
}
