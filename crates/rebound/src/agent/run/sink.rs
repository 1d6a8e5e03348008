//! Where reports go (the cluster, or stdout with `--dry-run`) and the
//! flush of the fold state's due conditions and Events to it.

use std::collections::HashMap;
use std::time::SystemTime;

use super::super::args::AgentArgs;
use super::super::fault::Accelerator;
use super::super::metrics::Metrics;
use super::super::pod_resources::PodResolver;
use super::super::report::{KubeReporter, build_event};
use super::super::state::{DesiredCondition, EventDue, FoldState};
use super::dry_run::ConditionView;

/// The `source` label of the PodResources API's errors
/// (`rebound_agent_source_errors_total`).
pub(super) const POD_RESOURCES_SOURCE: &str = "pod_resources";

/// Where reports go: the cluster, or stdout (`--dry-run`).
pub(super) enum Sink {
    Kube(Box<KubeReporter>),
    Print {
        last: HashMap<&'static str, DesiredCondition>,
        seq: u64,
    },
}

impl Sink {
    async fn condition(&mut self, c: &DesiredCondition, now: SystemTime, metrics: &Metrics) {
        match self {
            Sink::Kube(r) => match r.write_condition(c, now).await {
                Ok(true) => {
                    tracing::info!(condition = c.type_, status = c.status, reason = %c.reason, "condition written")
                }
                Ok(false) => {}
                Err(e) => {
                    metrics.api_error();
                    tracing::warn!(error = %e, "condition not written");
                }
            },
            Sink::Print { last, .. } => {
                let changed = last.get(c.type_) != Some(c);
                if changed && (c.status || last.contains_key(c.type_)) {
                    println!(
                        "{}",
                        serde_json::json!({ "condition": ConditionView::from(c) })
                    );
                    last.insert(c.type_, c.clone());
                }
            }
        }
    }

    async fn event(
        &mut self,
        due: &EventDue,
        node: &str,
        namespace: &str,
        now: SystemTime,
        metrics: &Metrics,
    ) -> Option<(String, u64)> {
        match (self, due) {
            (
                Sink::Kube(r),
                EventDue::Create {
                    fault,
                    count,
                    first_seen,
                    ..
                },
            ) => match r.create_event(fault, *count, *first_seen, now).await {
                Ok(name) => {
                    metrics.event();
                    Some((name, *count))
                }
                Err(e) => {
                    metrics.api_error();
                    tracing::warn!(error = %e, "event not created");
                    None
                }
            },
            (Sink::Kube(r), EventDue::Series { name, count, .. }) => {
                match r.update_series(name, *count, now).await {
                    Ok(()) => {
                        metrics.event();
                        Some((name.clone(), *count))
                    }
                    Err(e) => {
                        metrics.api_error();
                        tracing::warn!(error = %e, "event series not updated");
                        None
                    }
                }
            }
            (
                Sink::Print { seq, .. },
                EventDue::Create {
                    fault,
                    count,
                    first_seen,
                    ..
                },
            ) => {
                *seq += 1;
                let name = format!("{node}.dry-run-{seq}");
                let ev = build_event(
                    fault,
                    node,
                    None,
                    namespace,
                    name.clone(),
                    *count,
                    *first_seen,
                    now,
                );
                println!("{}", serde_json::json!({ "event": ev }));
                Some((name, *count))
            }
            (Sink::Print { .. }, EventDue::Series { name, count, .. }) => {
                println!(
                    "{}",
                    serde_json::json!({ "eventSeries": { "name": name, "count": count } })
                );
                Some((name.clone(), *count))
            }
        }
    }
}

pub(super) async fn flush(
    state: &mut FoldState,
    sink: &mut Sink,
    args: &AgentArgs,
    node: &str,
    metrics: &Metrics,
    pods: Option<&mut PodResolver>,
) {
    let now = SystemTime::now();
    for gone in state.expire(now) {
        tracing::info!(source = gone.fault.source, code = %gone.fault.code, device = ?gone.fault.device, "fault cleared after quiet period");
    }
    // Who holds the devices of new GPU faults: one List for all of them,
    // before their first line is written; best effort (logged by resolve).
    if let Some(r) = pods
        && r.resolve(state).await.is_err()
    {
        metrics.source_error(POD_RESOURCES_SOURCE);
    }
    for family in Accelerator::ALL {
        let c = state.condition(family, node);
        metrics.active(c.type_, state.active(family).len());
        sink.condition(&c, now, metrics).await;
    }
    for due in state.events_due(now, args.event_fold_interval) {
        let key = match &due {
            EventDue::Create { key, .. } | EventDue::Series { key, .. } => key.clone(),
        };
        if let Some((name, count)) = sink
            .event(&due, node, &args.event_namespace, now, metrics)
            .await
        {
            state.mark_event(&key, name, count, now);
        }
    }
}
