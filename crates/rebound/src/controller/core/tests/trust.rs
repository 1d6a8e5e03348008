//! Trust domains in the core (issue 27): a tenant's Event never takes
//! over, removes or absorbs a trusted fault, and never touches another
//! namespace's jobs or a node. Each test has a positive control: the
//! trusted fault (or the tenant's own job) is acted on, so the negative
//! assertion is made after a decision that came later.

use super::super::effect::EffectKind;
use super::bed::Bed;
use super::model::{self, FaultEvent, Model};
use serde_json::json;

fn deletes_of(b: &Bed, job: &str) -> usize {
    b.log
        .iter()
        .filter(|e| matches!(&e.kind, EffectKind::DeletePods { job: j, .. } if j.name == job))
        .count()
}

fn restarts_of(b: &Bed, job: &str) -> usize {
    b.log
        .iter()
        .filter(|e| matches!(&e.kind, EffectKind::RestartJob { job: j, .. } if j.name == job))
        .count()
}

#[test]
fn a_tenants_copy_of_a_trusted_fault_neither_takes_it_over_nor_drops_it() {
    // One node, two jobs of one pod each.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(restarts_of(&b, "j0"), 1, "j0 restarted: its cooldown runs");
    b.m.operator();
    b.pump();
    b.pass(5);
    // The bus falls off: the node is cordoned, j1 restarts now, j0 is
    // held for its cooldown (the occurrence stays pending).
    b.m.node_fault("n0", "79");
    b.pump();
    assert_eq!(b.cordons(), 1);
    assert_eq!(restarts_of(&b, "j1"), 1);
    // A tenant copies the line, `at` included, into an Event of its own
    // namespace, rewrites it, then deletes it.
    let mut copy = FaultEvent::xid("evil", "copy", "n0", "79");
    copy.at_ms = b.m.line_at("n0", "79");
    let ins = vec![b.m.event_written(&copy), b.m.event_written(&copy)];
    b.feed(ins);
    b.pump();
    let del = b.m.event_deleted(&copy);
    b.feed(vec![del]);
    b.pump();
    // j0's cooldown ends: it is restarted for the trusted fault (before:
    // the copy replaced the trusted occurrence, its deletion dropped it,
    // and j0 was never restarted).
    b.m.operator();
    b.pass(model::COOLDOWN);
    assert_eq!(
        restarts_of(&b, "j0"),
        2,
        "j0 restarted for the trusted fault"
    );
}

#[test]
fn a_tenants_event_during_an_in_place_restart_deletes_no_other_tenants_pods() {
    let mut spec = model::default_policy_spec();
    spec["restart"] =
        json!({"tiers": ["InPlace", "ReplaceFaulty", "Recreate"], "fallbackAfter": "2m"});
    let mut b = Bed::new(Some(spec));
    b.m.wire_all();
    b.pump();
    // j0 restarts in place for a software XID under one of its pods.
    let node_of = |b: &Bed, k: usize| {
        let pods: Vec<&serde_json::Value> =
            b.m.pods
                .values()
                .filter(|p| p["metadata"]["labels"][model::JOBSET_NAME] == "j0")
                .collect();
        pods[k % pods.len()]["spec"]["nodeName"]
            .as_str()
            .unwrap_or("n0")
            .to_string()
    };
    let first = node_of(&b, 0);
    b.m.node_fault(&first, "13");
    b.pump();
    let (current, released) = b.m.released("j0");
    assert!(current > released, "in place, held at the barrier");
    b.m.agents(false);
    b.pump();
    // Another tenant's Event names j0's other node at a cordoning level.
    let other = node_of(&b, 1);
    let forged = FaultEvent::xid("evil", "bus", &other, "79");
    let ins = vec![b.m.event_written(&forged)];
    b.feed(ins);
    b.pump();
    let after_tenant = deletes_of(&b, "j0");
    // Positive control: the same fault from the node itself moves j0's
    // pod off that node (the recovery absorbs it as ReplaceFaulty).
    b.m.node_fault(&other, "79");
    b.pump();
    assert_eq!(b.cordons(), 1, "the trusted fault cordons the node");
    assert_eq!(deletes_of(&b, "j0"), 1, "the trusted fault moves j0's pod");
    assert_eq!(
        after_tenant, 0,
        "the tenant's Event deleted none of j0's pods"
    );
}

#[test]
fn a_tenants_node_event_restarts_only_its_own_jobs_and_cordons_nothing() {
    // j0 in namespace ml; the tenant "evil" has no job on the node.
    let mut b = Bed::on(Model::new(1, 1, 1), None);
    let forged = FaultEvent::xid("evil", "bus", "n0", "79");
    let ins = vec![b.m.event_written(&forged)];
    b.feed(ins);
    b.pump();
    // Positive control: the same Event in ml (j0's own namespace)
    // restarts j0, and still cordons nothing.
    let own = FaultEvent::xid(model::NS, "own", "n0", "13");
    let ins = vec![b.m.event_written(&own)];
    b.feed(ins);
    b.pump();
    assert_eq!(
        restarts_of(&b, "j0"),
        1,
        "its own tenant's Event restarts j0"
    );
    assert_eq!(b.cordons(), 0, "no tenant Event cordons a node");
    b.pass(10);
    assert_eq!(b.cordons(), 0, "nor later, at rescan");
}
