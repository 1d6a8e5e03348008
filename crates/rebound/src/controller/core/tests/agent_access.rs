//! The restart agents' RoleBindings (issue 28): applied once per namespace
//! when wired pods appear, again by a new term, swept at a take-over; a
//! refused apply said at once on every wired job of the namespace, once,
//! and tried again.

use super::super::effect::EffectKind;
use super::super::input::Input;
use super::bed::Bed;

fn applies(b: &Bed) -> Vec<(String, Vec<String>)> {
    b.log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::AgentAccess {
                namespace,
                accounts,
                role,
                reads,
            } => {
                assert_eq!(role, "rebound-restart-agent");
                // The model's jobs are JobSets: their agents read JobSets.
                assert_eq!(
                    reads,
                    &[("jobset.x-k8s.io".to_string(), "jobsets".to_string())]
                );
                Some((namespace.clone(), accounts.clone()))
            }
            _ => None,
        })
        .collect()
}

fn sweeps(b: &Bed) -> usize {
    b.count(|k| matches!(k, EffectKind::AgentAccessSweep { .. }))
}

/// A bed whose core keeps the agents' bindings, its pods not wired yet.
fn bed() -> Bed {
    let mut b = Bed::new(None);
    b.core.cfg.restart_agent_role = Some("rebound-restart-agent".into());
    b
}

#[test]
fn wired_pods_get_one_binding_per_namespace_again_each_term() {
    let mut b = bed();
    b.pass(2);
    assert!(applies(&b).is_empty(), "no wired pod, no binding");
    assert_eq!(sweeps(&b), 1, "a take-over sweeps once");
    b.m.wire_all();
    b.pump();
    let ns = super::model::NS.to_string();
    assert_eq!(applies(&b), vec![(ns.clone(), vec!["default".to_string()])]);
    // Time passes, pods change, a job is restarted: nothing applied twice.
    b.pass(30);
    assert_eq!(applies(&b).len(), 1, "{:?}", applies(&b));
    assert_eq!(sweeps(&b), 1, "the next sweep is 10 minutes away");
    // A new term (another replica may have led): applied again, swept again.
    b.feed(vec![Input::Leader(true, 2)]);
    b.answer_reads();
    b.pump();
    assert_eq!(applies(&b).len(), 2);
    assert_eq!(sweeps(&b), 2);
    // Without the role (bindings made by hand): nothing.
    let mut b = Bed::new(None);
    b.m.wire_all();
    b.pump();
    b.pass(2);
    assert!(applies(&b).is_empty());
    assert_eq!(sweeps(&b), 0);
}

#[test]
fn a_refused_binding_is_said_on_each_wired_job_once_and_tried_again() {
    let mut b = bed();
    b.refuse = |k| matches!(k, EffectKind::AgentAccess { .. });
    b.m.wire_all();
    b.pump();
    let warned = |b: &Bed, j: &str| b.job_notes(j, crate::recover::reasons::AGENT_ACCESS_FAILED);
    for j in ["j0", "j1"] {
        let notes = warned(&b, j);
        assert_eq!(notes.len(), 1, "{j}: {notes:?}");
        assert!(notes[0].contains("default"), "{}", notes[0]);
        assert!(notes[0].contains("503"), "{}", notes[0]);
    }
    assert_eq!(b.core.metrics.agent_access_failed.get(), 1);
    // Tried again after 30 s, not said again.
    b.pass(29);
    assert_eq!(applies(&b).len(), 1);
    b.pass(2);
    assert_eq!(applies(&b).len(), 2);
    assert_eq!(warned(&b, "j0").len(), 1);
    // Allowed now: made at the next try, the gauge back at zero.
    b.refuse = |_| false;
    b.pass(31);
    assert_eq!(applies(&b).len(), 3);
    assert_eq!(b.core.metrics.agent_access_failed.get(), 0);
    b.pass(40);
    assert_eq!(applies(&b).len(), 3, "made: not tried again");
}
