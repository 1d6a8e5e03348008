//! Regressions of what the core knows when it starts or its watches
//! restart (issue #13): faults present at start-up, relists that drop
//! deletions, job kinds not yet discovered.

use super::super::Core;
use super::super::effect::{Effect, EffectKind};
use super::super::input::{Change, Input};
use super::bed::Bed;
use super::model::{self, Kind, Model};
use serde_json::json;

#[test]
fn faults_present_at_start_up_wait_for_the_jobs_and_their_recorded_cooldown() {
    let mut m = Model::new(4, 2, 2);
    // j0 was restarted 5 s ago by a previous leader (its record), and the
    // cooldown is 5m; one of its pods has failed since.
    let mut spec = model::default_policy_spec();
    spec["cooldown"] = json!("5m");
    m.policy = spec;
    m.t = 100;
    let at = m.wall() - chrono::Duration::seconds(5);
    let history = json!([{"at": at.to_rfc3339(), "generation": 1, "tier": "Recreate"}]).to_string();
    if let Some(j) = m.jobs.get_mut("j0") {
        j["metadata"]["annotations"] = json!({
            crate::recover::RESTART_HISTORY_ANNOTATION: history,
            crate::recover::RESTART_COUNT_ANNOTATION: "1",
            crate::inplace::GENERATION_ANNOTATION: "1",
            crate::inplace::RELEASED_ANNOTATION: "1",
        });
    }
    let i = m
        .pods
        .iter()
        .position(|(_, p)| p["metadata"]["labels"][model::JOBSET_NAME] == "j0")
        .unwrap_or(0);
    m.fail_pod(i);
    let mut core = model::core();
    // Everything but the jobs is listed first (their watch is slow).
    let all = m.startup();
    let (jobs, rest): (Vec<Input>, Vec<Input>) =
        all.into_iter().partition(|i| matches!(i, Input::Job(..)));
    let mut emitted = Vec::new();
    let feed = |core: &mut Core, ins: Vec<Input>, out: &mut Vec<Effect>| {
        for i in ins {
            out.extend(core.step(i, m.now()));
        }
    };
    feed(&mut core, vec![Input::Leader(true, 1)], &mut emitted);
    feed(&mut core, rest, &mut emitted);
    assert!(!core.ready(), "the job kind's watch has not synced");
    assert!(
        emitted.iter().all(|e| !matches!(
            e.kind,
            EffectKind::RestartJob { .. } | EffectKind::Record { .. }
        )),
        "nothing decided before the jobs are listed"
    );
    feed(&mut core, jobs, &mut emitted);
    assert!(core.ready());
    assert!(
        emitted
            .iter()
            .all(|e| !matches!(e.kind, EffectKind::RestartJob { .. })),
        "the recorded cooldown holds: {emitted:?}"
    );
    // The fault is held, not dropped: when the cooldown ends, j0 restarts.
    m.t += 300;
    let out = core.step(Input::Tick, m.now());
    assert_eq!(
        out.iter()
            .filter(|e| matches!(&e.kind, EffectKind::RestartJob { job, .. } if job.name == "j0"))
            .count(),
        1,
        "held through the cooldown, then acted on"
    );
}

#[test]
fn a_relist_drops_what_was_deleted_while_the_watch_was_down() {
    let mut b = Bed::new(None);
    // The root policy is deleted while the policies' watch is down (410):
    // the relist does not list it.
    b.feed(vec![
        Input::Policy(Change::Relist),
        Input::Policy(Change::Synced),
    ]);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 0, "a deleted policy is not in force");
    // A pod deleted meanwhile is gone from the store after a pods relist.
    let (name, _) = b.pods_of("j1")[0].clone();
    b.m.pods.remove(&name);
    let ins = b.m.relist(Kind::Pods);
    b.feed(ins);
    assert!(b.core.store.pod(model::NS, &name).is_none());
    // The way back: the policy listed again acts.
    let mut ins = vec![Input::Policy(Change::Relist)];
    ins.push(Input::Policy(Change::Apply(Box::new(model::policy(
        &model::default_policy_spec(),
    )))));
    ins.push(Input::Policy(Change::Synced));
    b.feed(ins);
    let i = b.pod_index("j1");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1);
}

#[test]
fn job_kinds_not_yet_discovered_hold_every_decision_until_they_are() {
    let mut m = Model::new(4, 1, 2);
    let all = m.startup();
    let mut core = model::core();
    let now = m.now();
    core.step(Input::Leader(true, 1), now);
    for i in all {
        if matches!(i, Input::JobKinds(_) | Input::Job(..)) {
            continue;
        }
        core.step(i, now);
    }
    assert!(!core.ready(), "discovery has not answered");
    m.fail_pod(0);
    let ins = m.deliver(Kind::Pods, 100);
    let mut out = Vec::new();
    for i in ins {
        out.extend(core.step(i, m.now()));
    }
    assert!(
        out.iter()
            .all(|e| !matches!(e.kind, EffectKind::RestartJob { .. }))
    );
    // Discovery answers (late), the kind's watch syncs: the fault is decided.
    out.extend(core.step(
        Input::JobKinds(vec![(
            crate::api::WorkloadKind::JobSet,
            model::jobset_resource(),
        )]),
        m.now(),
    ));
    assert!(!core.ready(), "the new kind's watch has not synced yet");
    for i in m.relist(Kind::Jobs) {
        out.extend(core.step(i, m.now()));
    }
    // The take-over's fresh read of the records is answered.
    for e in out.clone() {
        if e.kind.is_fresh_read() {
            let _ = m.apply(&e);
        }
    }
    for i in m.answers.drain(..).collect::<Vec<_>>() {
        out.extend(core.step(i, m.now()));
    }
    assert_eq!(
        out.iter()
            .filter(|e| matches!(e.kind, EffectKind::RestartJob { .. }))
            .count(),
        1
    );
}

#[test]
fn a_tenant_policys_progress_annotation_is_read_on_its_own_pods_only() {
    let mut core = model::core();
    let now = Model::new(1, 1, 1).now();
    let root_spec =
        json!({"selector": {}, "hang": {"noProgressFor": "15m", "annotation": "ops.example/step"}});
    let mut tenant: crate::api::RecoveryPolicy = model::policy(
        &json!({"selector": {}, "hang": {"noProgressFor": "15m", "annotation": "team-a.example/step"}}),
    );
    tenant.metadata.namespace = Some("team-a".into());
    tenant.metadata.name = Some("mine".into());
    core.step(
        Input::Policy(Change::Apply(Box::new(model::policy(&root_spec)))),
        now,
    );
    core.step(Input::Policy(Change::Apply(Box::new(tenant))), now);
    let keys = core.progress_keys.get();
    assert!(keys.reads("team-a.example/step", "team-a"));
    assert!(
        !keys.reads("team-a.example/step", "team-b"),
        "a tenant's key is not kept on every pod of the cluster"
    );
    assert!(
        keys.reads("ops.example/step", "team-b"),
        "the root policy's is"
    );
    assert!(keys.reads(
        crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION,
        "team-b"
    ));
}
