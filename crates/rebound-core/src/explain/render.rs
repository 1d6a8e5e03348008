//! Human-readable rendering of a decision.

use crate::policy::{Decision, JobAction, NodeAction};
use std::fmt::Write;

/// Render a decision as the text `rebound explain` prints.
pub fn render_text(d: &Decision) -> String {
    let mut o = String::new();
    let f = &d.fault;
    let mut where_ = String::new();
    for (label, v) in [
        ("node", &f.node),
        ("device", &f.device),
        ("pod", &f.pod),
        ("container", &f.container),
    ] {
        if let Some(v) = v {
            let _ = write!(where_, " {label} {v}");
        }
    }
    let _ = writeln!(
        o,
        "fault:    {} {}{}{}",
        f.source,
        f.code,
        f.reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        where_
    );
    let _ = writeln!(o, "seen:     {} time(s) in the escalation window", f.count);
    let _ = writeln!(o, "level:    {}  (rule {})", d.level, d.rule);
    if let Some(e) = &d.escalated_by {
        let _ = writeln!(o, "          escalated by {e}");
    }
    match &d.node {
        Some(n) => {
            let acts: Vec<String> = n
                .actions
                .iter()
                .map(|a| match a {
                    NodeAction::Cordon => "cordon".to_string(),
                    NodeAction::Taint { key } => format!("taint {key}:NoSchedule"),
                })
                .collect();
            let verdict = match (&n.skip, acts.is_empty()) {
                (Some(s), true) => format!("nothing ({})", s.name()),
                (Some(s), false) => format!("{} — held: {}", acts.join(" + "), s.name()),
                (None, true) => "nothing".into(),
                (None, false) => acts.join(" + "),
            };
            let _ = writeln!(
                o,
                "node:     {}: {verdict}  [node settings: {}]",
                n.node, n.config_from
            );
            for r in &n.reasons {
                let _ = writeln!(o, "          - {r}");
            }
        }
        None => {
            let _ = writeln!(o, "node:     (the fault names no node)");
        }
    }
    if d.jobs.is_empty() {
        let _ = writeln!(
            o,
            "job:      (none given; pass --job kind=...,name=...,namespace=...)"
        );
    }
    for j in &d.jobs {
        let act = j.action.as_ref().map(|a| match a {
            JobAction::RestartJob { .. } => "restart job".to_string(),
            JobAction::RestartPod { pod, .. } => format!("restart pod {pod}"),
        });
        let verdict = match (&j.skip, act) {
            (Some(s), Some(a)) => format!("{a} — held: {}", s.name()),
            (Some(s), None) => format!("nothing ({})", s.name()),
            (None, Some(a)) => a,
            (None, None) => "nothing".into(),
        };
        let _ = writeln!(o, "job:      {}: {verdict}", j.job);
        if let Some(p) = &j.policy {
            let _ = writeln!(o, "          policy {p}");
        }
        for (p, why) in &j.shadowed {
            let _ = writeln!(o, "          not {p}: {why}");
        }
        for r in &j.reasons {
            let _ = writeln!(o, "          - {r}");
        }
    }
    o
}
