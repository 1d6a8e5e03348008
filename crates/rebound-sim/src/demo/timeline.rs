//! The demo's timeline: each decision of the controller as readable
//! lines (the fault seen, its level and rule, every job and node action
//! with its reasons).

use std::time::Instant;

/// One decision as timeline lines: the fault, its level and rule, and each
/// job and node decision with its reasons.
pub(super) fn timeline_entry(t0: Instant, d: &rebound_core::policy::Decision) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let t = t0.elapsed().as_secs_f64();
    let f = &d.fault;
    let _ = writeln!(
        o,
        "[{t:>7.3}s]   seen: {} {}{} → level {} (rule {}{})",
        f.source,
        f.code,
        f.node
            .as_ref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default(),
        d.level,
        d.rule,
        d.escalated_by
            .as_ref()
            .map(|e| format!(", escalated by {e} after {} sightings", f.count))
            .unwrap_or_default()
    );
    if let Some(n) = &d.node {
        let what = match (&n.skip, n.actions.is_empty()) {
            (None, false) => "cordon".to_string(),
            (Some(s), _) => format!("no node action ({})", s.name()),
            (None, true) => "no node action".to_string(),
        };
        let _ = writeln!(
            o,
            "[{t:>7.3}s]   decided: node {}: {what} — {}",
            n.node,
            n.reasons.join("; ")
        );
    }
    for j in &d.jobs {
        let what = match (&j.skip, &j.action) {
            (None, Some(rebound_core::policy::JobAction::RestartJob { .. })) => {
                "restart the job".to_string()
            }
            (None, Some(rebound_core::policy::JobAction::RestartPod { pod, .. })) => {
                format!("restart pod {pod}")
            }
            (Some(s), _) => format!("no restart ({})", s.name()),
            (None, None) => "nothing".into(),
        };
        let _ = writeln!(
            o,
            "[{t:>7.3}s]   decided: {}: {what} — {}",
            j.job,
            j.reasons.join("; ")
        );
    }
    o
}
