//! Pacing of restarts: cooldowns (plain and CEL), the restart budget and
//! its history, graded escalation from pod to job.

use super::*;

#[test]
fn cooldown_by_plain_duration() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            cooldown: Some("5m".into()),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    let d = decide_job(
        &c,
        None,
        &job("team-a", &[], vec![ago(60, false)]),
        &s,
        false,
        now(),
    );
    assert_eq!(
        d.skip,
        Some(Skip::Cooldown {
            remaining_secs: 240
        })
    );
    let d = decide_job(
        &c,
        None,
        &job("team-a", &[], vec![ago(301, false)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts());
}

#[test]
fn cooldown_by_cel_grows_with_restarts() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            cooldown: Some(r#"job.restarts < 3 ? duration("30s") : duration("5m")"#.into()),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    // Two restarts, last 60s ago: 30s cooldown has passed.
    let d = decide_job(
        &c,
        None,
        &job("team-a", &[], vec![ago(3000, false), ago(60, false)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    // Three restarts: 5m cooldown holds.
    let h = vec![ago(4000, false), ago(3000, false), ago(60, false)];
    let d = decide_job(&c, None, &job("team-a", &[], h), &s, false, now());
    assert!(matches!(d.skip, Some(Skip::Cooldown { .. })), "{d:?}");
}

/// A team's budget of 1,000 restarts in 30 days: the 1,000th restart in
/// the window is allowed, the 1,001st is not, and a restart just outside
/// the window no longer counts.
#[test]
fn a_budget_of_a_thousand_in_thirty_days_holds_at_its_boundary() {
    let spec = RecoveryPolicySpec {
        cooldown: Some("0s".into()),
        restart_budget: Some(RestartBudget {
            max_restarts: 1000,
            window: Some("720h".into()),
            count_infrastructure: false,
        }),
        ..Default::default()
    };
    let s = set(&[policy("team-a", "p", spec)]);
    let window = 720 * 3600;
    // 999 restarts within the window, 40 min apart.
    let mut h: Vec<_> = (0..999).rev().map(|i| ago(60 + 2400 * i, false)).collect();
    assert!(h[0].at > now() - chrono::Duration::seconds(window));
    let decide = |h: &Vec<_>| {
        decide_job(
            &classified(Level::RestartJob, false),
            None,
            &job("team-a", &[], h.clone()),
            &s,
            false,
            now(),
        )
    };
    assert!(
        decide(&h).acts(),
        "the 1,000th restart is within the budget"
    );
    h.insert(0, ago(window - 1, false));
    assert_eq!(
        decide(&h).skip,
        Some(Skip::BudgetExhausted {
            used: 1000,
            max: 1000
        })
    );
    // The oldest leaves the window: one restart free again.
    h[0] = ago(window, false);
    assert!(decide(&h).acts());
}

#[test]
fn budget_counts_job_faults_but_not_hardware_by_default() {
    let spec = |infra| RecoveryPolicySpec {
        cooldown: Some("0s".into()),
        restart_budget: Some(RestartBudget {
            max_restarts: 2,
            window: Some("1h".into()),
            count_infrastructure: infra,
        }),
        ..Default::default()
    };
    let s = set(&[policy("team-a", "p", spec(false))]);
    let h = vec![ago(600, false), ago(300, false)];
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job("team-a", &[], h.clone()),
        &s,
        false,
        now(),
    );
    assert_eq!(d.skip, Some(Skip::BudgetExhausted { used: 2, max: 2 }));
    // A hardware fault is free of the budget.
    let d = decide_job(
        &classified(Level::Separate, true),
        None,
        &job("team-a", &[], h),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    // Past hardware restarts do not use the budget either.
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job("team-a", &[], vec![ago(600, true), ago(300, true)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts(), "{d:?}");
    // With countInfrastructure they do.
    let s = set(&[policy("team-a", "p", spec(true))]);
    let d = decide_job(
        &classified(Level::Separate, true),
        None,
        &job("team-a", &[], vec![ago(600, true), ago(300, true)]),
        &s,
        false,
        now(),
    );
    assert_eq!(d.skip, Some(Skip::BudgetExhausted { used: 2, max: 2 }));
    // Restarts outside the window are forgotten.
    let s = set(&[policy("team-a", "p", spec(false))]);
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job("team-a", &[], vec![ago(7200, false), ago(4000, false)]),
        &s,
        false,
        now(),
    );
    assert!(d.acts());
}

#[test]
fn graded_pod_first_then_job() {
    let s = set(&[policy(
        "team-a",
        "p",
        RecoveryPolicySpec {
            cooldown: Some("0s".into()),
            escalation: Some(GradedEscalation {
                restart_pod_first: true,
                job_after: Some("2m".into()),
            }),
            ..Default::default()
        },
    )]);
    let c = classified(Level::RestartJob, false);
    let d = decide_job(&c, None, &job("team-a", &[], vec![]), &s, false, now());
    assert_eq!(
        d.action,
        Some(JobAction::RestartPod {
            pod: "llm-worker-0".into(),
            preserve_logs: None
        })
    );
    let pod_restart = RestartRecord {
        at: now() - chrono::Duration::seconds(30),
        infrastructure: false,
        pod_only: true,
        ..Default::default()
    };
    let d = decide_job(
        &c,
        None,
        &job("team-a", &[], vec![pod_restart.clone()]),
        &s,
        false,
        now(),
    );
    assert!(
        matches!(
            d.skip,
            Some(Skip::WaitingForPodRestart { remaining_secs: 90 })
        ),
        "{d:?}"
    );
    let old = RestartRecord {
        at: now() - chrono::Duration::seconds(150),
        ..pod_restart
    };
    let d = decide_job(&c, None, &job("team-a", &[], vec![old]), &s, false, now());
    assert_eq!(
        d.action,
        Some(JobAction::RestartJob {
            preserve_logs: None
        })
    );
    assert!(d.acts());
}

#[test]
fn a_budget_larger_than_the_kept_history_is_refused() {
    let budget = |n: u32| {
        policy(
            "team-a",
            &format!("budget-{n}"),
            RecoveryPolicySpec {
                restart_budget: Some(RestartBudget {
                    max_restarts: n,
                    window: None,
                    count_infrastructure: false,
                }),
                ..Default::default()
            },
        )
    };
    let mut s = PolicySet::new(ROOT);
    // The most the history can show is accepted...
    assert!(s.upsert(&budget(MAX_BUDGET)).is_ok());
    // ...one more could never be used up: refused with the reason.
    let e = s.upsert(&budget(MAX_BUDGET + 1)).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.reason),
        ("spec.restartBudget.maxRestarts", "InvalidBudget")
    );
    assert!(e.message.contains("never be used up"), "{}", e.message);
    // And the CRD's schema says the same to kubectl.
    let schema = serde_json::to_value(schemars::schema_for!(RestartBudget)).unwrap_or_default();
    assert_eq!(
        schema["properties"]["maxRestarts"]["maximum"],
        serde_json::json!(MAX_BUDGET)
    );
}
