//! Node conditions and kcover Events in the samples, and the sample
//! policies' cooldown, budget and dry run.

use super::*;

// --- other sources and policies ------------------------------------------------------------

#[test]
fn samples_node_conditions_and_kcover_events() {
    assert_eq!(
        classify_once("source=NodeCondition,code=KernelDeadlock,reason=DockerHung,node=n").level,
        Level::Separate
    );
    assert_eq!(
        classify_once("source=NodeCondition,code=FrequentKubeletRestart,node=n").level,
        Level::PreSeparate
    );
    assert_eq!(
        classify_once("source=NodeCondition,code=SomeVendorCondition,node=n").level,
        Level::Ignore
    );
    assert_eq!(
        classify_once("source=NodeCondition,code=NotReady,node=n").level,
        Level::Ignore
    );
    let long = decide(
        &mut engine(),
        "source=NodeCondition,code=NotReady,node=n",
        None,
        3,
        Utc::now(),
    );
    assert_eq!(long.level, Level::ResetDevice, "NotReady for 2 minutes");
    let d = decide(
        &mut engine(),
        "source=KubeEvent,code=NeedRecovery,namespace=team-a",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert_eq!(d.rule, "kube-event/kcover-need-recovery");
    assert!(d.jobs[0].acts(), "{:?}", d.jobs);
}

#[test]
fn samples_policies_cooldown_budget_and_dry_run() {
    let now = Utc::now();
    let mut e = engine();
    let job = |ns: &str, ago: &[&str]| {
        let ago: Vec<String> = ago.iter().map(|s| s.to_string()).collect();
        parse_job(
            &format!("kind=Job,name=j,namespace={ns},labels.kcover.io/cascading-recovery=true"),
            &ago,
            &[],
            now,
        )
        .unwrap()
    };
    let exit1 = |ns: &str| {
        parse_fault(
            &format!("source=PodExit,exitCode=1,node=n,pod=p,namespace={ns}"),
            now,
        )
        .unwrap()
    };
    // Cluster default: the cooldown grows with restarts (4 restarts: 2 minutes).
    let d = explain(
        &mut e,
        exit1("team-c"),
        Some(job("team-c", &["90s", "1h", "2h", "3h"])),
        1,
        now,
    );
    assert_eq!(
        d.jobs[0].skip.as_ref().map(|s| s.name()),
        Some("Cooldown"),
        "{:?}",
        d.jobs[0].reasons
    );
    let d = explain(
        &mut e,
        exit1("team-c"),
        Some(job("team-c", &["3m", "1h", "2h", "3h"])),
        1,
        now,
    );
    assert!(d.jobs[0].acts(), "{:?}", d.jobs[0].reasons);
    // ... and stops after 5 self-inflicted restarts within an hour.
    let d = explain(
        &mut e,
        exit1("team-c"),
        Some(job("team-c", &["11m", "20m", "30m", "40m", "50m"])),
        1,
        now,
    );
    assert_eq!(
        d.jobs[0].skip.as_ref().map(|s| s.name()),
        Some("BudgetExhausted"),
        "{:?}",
        d.jobs[0].reasons
    );
    // team-b tries rebound in dry run: decided, not done.
    let d = explain(&mut e, exit1("team-b"), Some(job("team-b", &[])), 1, now);
    assert_eq!(d.jobs[0].policy.as_deref(), Some("team-b/try-rebound"));
    assert_eq!(d.jobs[0].skip.as_ref().map(|s| s.name()), Some("DryRun"));
    // Not opted in: no policy restarts it.
    let not_opted = parse_job("kind=Job,name=j,namespace=team-c", &[], &[], now).unwrap();
    let d = explain(&mut e, exit1("team-c"), Some(not_opted), 1, now);
    assert_eq!(d.jobs[0].skip.as_ref().map(|s| s.name()), Some("NoPolicy"));
    // The team's gate: a paused job is left alone.
    let mut paused = parse_job(OPTED_IN_LLM, &[], &[], now).unwrap();
    paused
        .view
        .annotations
        .insert("rebound.dev/pause".into(), "true".into());
    let d = explain(&mut e, exit1("team-a"), Some(paused), 1, now);
    assert_eq!(
        d.jobs[0].skip.as_ref().map(|s| s.name()),
        Some("GateFalse"),
        "{:?}",
        d.jobs[0].reasons
    );
}
