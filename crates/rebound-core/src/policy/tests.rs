//! Tests of the policy decision: shared fixtures and the basic cases here,
//! the rest by topic in the submodules.

use super::*;
use crate::api::{
    GradedEscalation, NodeActions, RecoveryPolicy, RecoveryPolicySpec, RestartBudget, WorkloadKind,
};
use crate::expr::JobView;
use crate::fault::{Classified, Fault, FaultSource, Level};
use chrono::{DateTime, TimeZone, Utc};
use std::collections::BTreeMap;

mod cel_scope;
mod node;
mod pacing;
mod refusals;
mod selection;

const ROOT: &str = "rebound-system";

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

fn policy(ns: &str, name: &str, spec: RecoveryPolicySpec) -> RecoveryPolicy {
    let mut p = RecoveryPolicy::new(name, spec);
    p.metadata.namespace = Some(ns.into());
    p.metadata.generation = Some(1);
    p
}

fn set(ps: &[RecoveryPolicy]) -> PolicySet {
    let mut s = PolicySet::new(ROOT);
    for p in ps {
        s.upsert(p).expect("valid policy");
    }
    s
}

fn classified(level: Level, trusted: bool) -> Classified {
    let mut f = Fault::new(FaultSource::PodExit, "1", now());
    f.pod = Some("llm-worker-0".into());
    f.namespace = Some("team-a".into());
    f.trusted = trusted;
    Classified {
        fault: f,
        level,
        rule: "test".into(),
        escalated_by: None,
    }
}

fn job(ns: &str, labels: &[(&str, &str)], history: Vec<RestartRecord>) -> JobInput {
    JobInput {
        kind: Some(WorkloadKind::PyTorchJob),
        view: JobView {
            kind: "PyTorchJob".into(),
            name: "llm".into(),
            namespace: ns.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        },
        pod_labels: BTreeMap::new(),
        history,
        restart_policy_never: false,
        running: false,
    }
}

fn ago(secs: i64, infrastructure: bool) -> RestartRecord {
    RestartRecord {
        at: now() - chrono::Duration::seconds(secs),
        infrastructure,
        pod_only: false,
        ..Default::default()
    }
}

#[test]
fn restarts_a_covered_job() {
    let s = set(&[policy("team-a", "p", RecoveryPolicySpec::default())]);
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job("team-a", &[], vec![]),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    assert_eq!(
        d.action,
        Some(JobAction::RestartJob {
            preserve_logs: None
        })
    );
    assert_eq!(d.policy.as_deref(), Some("team-a/p"));
}

#[test]
fn ignore_and_preseparate_do_not_restart() {
    let s = set(&[policy("team-a", "p", RecoveryPolicySpec::default())]);
    for l in [Level::Ignore, Level::PreSeparate] {
        let d = decide_job(
            &classified(l, true),
            None,
            &job("team-a", &[], vec![]),
            &s,
            false,
            now(),
        );
        assert_eq!(d.skip, Some(Skip::LevelIgnore), "{l}");
    }
}

#[test]
fn gate_restart_policy_never_and_global_dry_run() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            when: Some(r#"fault.level != "PreSeparate" && job.restarts < 1"#.into()),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    assert!(decide_job(&c, None, &job("team-a", &[], vec![]), &s, false, now()).acts());
    assert_eq!(
        decide_job(
            &c,
            None,
            &job("team-a", &[], vec![ago(9999, false)]),
            &s,
            false,
            now()
        )
        .skip,
        Some(Skip::GateFalse)
    );
    let mut never = job("team-a", &[], vec![]);
    never.restart_policy_never = true;
    assert_eq!(
        decide_job(&c, None, &never, &s, false, now()).skip,
        Some(Skip::RestartPolicyNever)
    );
    assert_eq!(
        decide_job(&c, None, &job("team-a", &[], vec![]), &s, true, now()).skip,
        Some(Skip::DryRun)
    );
}
