//! Prometheus metrics of the agent, served at `/metrics` (with `/healthz`,
//! whose body is [`super::health::HealthReport`]).
//!
//! Label values come from parsed input (codes), so the number of distinct
//! label sets is capped: beyond [`MAX_CODE_LABELS`], codes are counted as
//! `other` and a hostile log cannot grow the registry.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::health::{Health, SourceState};

/// Every metric the agent exports, as Prometheus sees it (counters with
/// `_total`), for the docs and alert rules to be checked against.
pub const NAMES: &[&str] = &[
    "rebound_agent_faults_total",
    "rebound_agent_parse_errors_total",
    "rebound_agent_source_up",
    "rebound_agent_source_failing",
    "rebound_agent_source_errors_total",
    "rebound_agent_source_restarts_total",
    "rebound_agent_active_faults",
    "rebound_agent_api_errors_total",
    "rebound_agent_events_total",
];

/// Most distinct `(source, code)` label sets on the faults counter.
pub const MAX_CODE_LABELS: usize = 512;

/// Labels of the faults counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaultLabels {
    /// Fault source.
    pub source: String,
    /// Fault code, or `other` past the cap.
    pub code: String,
}

/// Labels naming an input source (`kmsg`, `nvml`, `dcgm`, `npusmi`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// Source name.
    pub source: String,
}

/// Labels naming a condition type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// `GpuFault` / `NpuFault`.
    pub condition: String,
}

/// The agent's metrics; cheap to clone (shared handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    faults: Family<FaultLabels, Counter>,
    parse_errors: Family<SourceLabels, Counter>,
    source_up: Family<SourceLabels, Gauge>,
    source_failing: Family<SourceLabels, Gauge>,
    source_errors: Family<SourceLabels, Counter>,
    source_restarts: Family<SourceLabels, Counter>,
    active: Family<ConditionLabels, Gauge>,
    api_errors: Counter,
    events: Counter,
    seen_codes: Arc<Mutex<HashSet<(String, String)>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("rebound_agent");
        let faults = Family::<FaultLabels, Counter>::default();
        let parse_errors = Family::<SourceLabels, Counter>::default();
        let source_up = Family::<SourceLabels, Gauge>::default();
        let source_failing = Family::<SourceLabels, Gauge>::default();
        let source_errors = Family::<SourceLabels, Counter>::default();
        let source_restarts = Family::<SourceLabels, Counter>::default();
        let active = Family::<ConditionLabels, Gauge>::default();
        let api_errors = Counter::default();
        let events = Counter::default();
        registry.register(
            "faults",
            "Faults observed, by source and code (repeats included)",
            faults.clone(),
        );
        registry.register(
            "parse_errors",
            "Input lines or documents with a fault marker that did not parse",
            parse_errors.clone(),
        );
        registry.register(
            "source_up",
            "1 when a fault source works, 0 when it is disabled, not available or failing",
            source_up.clone(),
        );
        registry.register(
            "source_failing",
            "1 while a fault source is down because of an error (not because it is absent)",
            source_failing.clone(),
        );
        registry.register(
            "source_errors",
            "Errors of a fault source: failed runs and polls, and errors it worked through",
            source_errors.clone(),
        );
        registry.register(
            "source_restarts",
            "Times a failed fault source was started again",
            source_restarts.clone(),
        );
        registry.register(
            "active_faults",
            "Faults currently active, by condition",
            active.clone(),
        );
        registry.register(
            "api_errors",
            "Failed writes to the Kubernetes API",
            api_errors.clone(),
        );
        registry.register(
            "events",
            "Kubernetes Events created or updated",
            events.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            faults,
            parse_errors,
            source_up,
            source_failing,
            source_errors,
            source_restarts,
            active,
            api_errors,
            events,
            seen_codes: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Count one observed fault.
    pub fn fault(&self, source: &str, code: &str) {
        let key = (source.to_string(), code.to_string());
        let code = match self.seen_codes.lock() {
            Ok(mut seen) => {
                if seen.contains(&key) || seen.len() < MAX_CODE_LABELS {
                    seen.insert(key.clone());
                    key.1
                } else {
                    "other".to_string()
                }
            }
            Err(_) => "other".to_string(),
        };
        self.faults
            .get_or_create(&FaultLabels {
                source: key.0,
                code,
            })
            .inc();
    }

    /// Count parse errors of a source.
    pub fn parse_errors(&self, source: &str, n: u64) {
        if n > 0 {
            self.parse_errors
                .get_or_create(&SourceLabels {
                    source: source.to_string(),
                })
                .inc_by(n);
        }
    }

    /// Set a source's state: up 1 only when it works, failing 1 only when
    /// it is down because of an error.
    pub fn source_state(&self, source: &str, state: SourceState) {
        let labels = SourceLabels {
            source: source.to_string(),
        };
        self.source_up
            .get_or_create(&labels)
            .set(i64::from(state == SourceState::Up));
        self.source_failing
            .get_or_create(&labels)
            .set(i64::from(state == SourceState::Failing));
    }

    /// Count an error of a source.
    pub fn source_error(&self, source: &str) {
        self.source_errors
            .get_or_create(&SourceLabels {
                source: source.to_string(),
            })
            .inc();
    }

    /// Count a restart of a source.
    pub fn source_restart(&self, source: &str) {
        self.source_restarts
            .get_or_create(&SourceLabels {
                source: source.to_string(),
            })
            .inc();
    }

    /// Set the active-fault gauge of a condition.
    pub fn active(&self, condition: &str, n: usize) {
        self.active
            .get_or_create(&ConditionLabels {
                condition: condition.to_string(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Count a failed API write.
    pub fn api_error(&self) {
        self.api_errors.inc();
    }

    /// Count an Event write.
    pub fn event(&self) {
        self.events.inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Serve `/metrics` and `/healthz` (each source's state as JSON, always
/// 200 while the agent runs: see [`super::health`]) until the task is dropped.
pub async fn serve(addr: SocketAddr, metrics: Metrics, health: Health) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use axum::{Json, Router, http::header, routing::get};
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let h = health.clone();
                async move { Json(h.report()) }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding metrics address {addr}"))?;
    axum::serve(listener, app)
        .await
        .context("serving metrics")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_caps_code_labels() {
        let m = Metrics::new();
        m.fault("NvidiaXid", "79");
        m.fault("NvidiaXid", "79");
        for i in 0..(MAX_CODE_LABELS + 10) {
            m.fault("NvidiaXid", &format!("x{i}"));
        }
        m.parse_errors("kmsg", 2);
        m.source_state("dcgm", SourceState::Unavailable);
        m.source_state("kmsg", SourceState::Failing);
        m.source_error("kmsg");
        m.source_restart("kmsg");
        m.active("GpuFault", 0);
        let text = m.encode();
        assert!(
            text.contains(r#"rebound_agent_faults_total{source="NvidiaXid",code="79"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"code="other"} 11"#), "{text}");
        assert!(text.contains(r#"rebound_agent_parse_errors_total{source="kmsg"} 2"#));
        assert!(text.contains(r#"rebound_agent_source_up{source="dcgm"} 0"#));
        assert!(text.contains(r#"rebound_agent_source_failing{source="dcgm"} 0"#));
        assert!(text.contains(r#"rebound_agent_source_failing{source="kmsg"} 1"#));
        assert!(text.contains(r#"rebound_agent_source_errors_total{source="kmsg"} 1"#));
        assert!(text.contains(r#"rebound_agent_source_restarts_total{source="kmsg"} 1"#));
        // NAMES lists exactly what is exported.
        let exported: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        let named: std::collections::BTreeSet<&str> = NAMES
            .iter()
            .map(|n| n.strip_suffix("_total").unwrap_or(n))
            .collect();
        assert_eq!(exported, named);
    }
}
