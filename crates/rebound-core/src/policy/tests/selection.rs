//! Which policy covers a job: the root default, the namespace's own, the
//! most specific selector, the pod's opt-in label, and tenant boundaries.

use super::*;

#[test]
fn root_default_applies_until_the_namespace_has_its_own() {
    let root = policy(
        ROOT,
        "default",
        RecoveryPolicySpec {
            cooldown: Some("1m".into()),
            ..Default::default()
        },
    );
    let s = set(std::slice::from_ref(&root));
    let mut c = classified(Level::RestartJob, false);
    c.fault.namespace = Some("team-b".into());
    let d = decide_job(&c, None, &job("team-b", &[], vec![]), &s, false, now());
    assert_eq!(d.policy.as_deref(), Some("rebound-system/default"));
    let local = policy(
        "team-b",
        "own",
        RecoveryPolicySpec {
            dry_run: true,
            ..Default::default()
        },
    );
    let s = set(&[root, local]);
    let d = decide_job(&c, None, &job("team-b", &[], vec![]), &s, false, now());
    assert_eq!(d.policy.as_deref(), Some("team-b/own"));
    assert_eq!(d.skip, Some(Skip::DryRun));
    assert_eq!(
        d.action,
        Some(JobAction::RestartJob {
            preserve_logs: None
        }),
        "dry run still says what it would do"
    );
}

#[test]
fn most_specific_selector_wins_and_ties_go_by_name() {
    let labels = BTreeMap::from([(
        "kcover.io/cascading-recovery".to_string(),
        "true".to_string(),
    )]);
    let broad = policy("team-a", "a-broad", RecoveryPolicySpec::default());
    let mut specific_spec = RecoveryPolicySpec::default();
    specific_spec.selector.match_labels = labels.clone();
    let specific = policy("team-a", "z-specific", specific_spec.clone());
    let twin = policy("team-a", "b-twin", specific_spec);
    let s = set(&[broad, specific, twin]);
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job(
            "team-a",
            &[("kcover.io/cascading-recovery", "true")],
            vec![],
        ),
        &s,
        false,
        now(),
    );
    assert_eq!(d.policy.as_deref(), Some("team-a/b-twin"));
    let losers: Vec<_> = d.shadowed.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(losers, vec!["team-a/z-specific", "team-a/a-broad"]);
    assert!(d.shadowed[0].1.contains("by name"));
    // Without the label only the broad one matches.
    let d = decide_job(
        &classified(Level::RestartJob, false),
        None,
        &job("team-a", &[], vec![]),
        &s,
        false,
        now(),
    );
    assert_eq!(d.policy.as_deref(), Some("team-a/a-broad"));
}

#[test]
fn opt_in_label_on_the_pod_is_enough() {
    let mut spec = RecoveryPolicySpec::default();
    spec.selector
        .match_labels
        .insert("kcover.io/cascading-recovery".into(), "true".into());
    spec.selector.kinds = vec![WorkloadKind::VolcanoJob];
    let s = set(&[policy("team-a", "p", spec)]);
    let mut j = job("team-a", &[], vec![]);
    j.kind = Some(WorkloadKind::VolcanoJob);
    j.pod_labels
        .insert("kcover.io/cascading-recovery".into(), "true".into());
    assert!(
        decide_job(
            &classified(Level::RestartJob, false),
            None,
            &j,
            &s,
            false,
            now()
        )
        .acts()
    );
    j.kind = Some(WorkloadKind::PyTorchJob);
    assert_eq!(
        decide_job(
            &classified(Level::RestartJob, false),
            None,
            &j,
            &s,
            false,
            now()
        )
        .skip,
        Some(Skip::NoPolicy)
    );
}

#[test]
fn tenant_event_cannot_restart_another_tenants_job() {
    let s = set(&[policy("team-b", "p", RecoveryPolicySpec::default())]);
    let c = classified(Level::RestartJob, false); // from team-a, untrusted
    assert_eq!(
        decide_job(&c, None, &job("team-b", &[], vec![]), &s, false, now()).skip,
        Some(Skip::Untrusted)
    );
}
