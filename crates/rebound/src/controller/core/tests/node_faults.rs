//! A node fault concerns every job with a pod on the node: what one job's
//! restart does must not hide another job's own decision.

use super::bed::Bed;
use super::model::{self, Model};

#[test]
fn a_job_held_by_its_cooldown_is_restarted_when_it_ends_though_another_job_was_acted_on() {
    // One node, two jobs with a pod each on it.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    // j1 restarts for a failure of its own: its cooldown starts.
    let i = b.pod_index("j1");
    b.m.fail_pod(i);
    b.pump();
    assert_eq!(b.restarts(), 1);
    b.m.operator();
    b.pump();
    b.pass(5);
    // An app-level XID on the node: both jobs are concerned; j0 restarts
    // now, j1 waits for its cooldown.
    b.m.node_fault("n0", "13");
    b.pump();
    assert_eq!(b.restarts(), 2, "j0 restarted, j1 held");
    b.m.operator();
    b.pass(model::COOLDOWN - 10);
    assert_eq!(b.restarts(), 2, "j1 still in its cooldown");
    // The cooldown ends: j1 is restarted (the acted job j0 used to hide
    // the held one: the occurrence was marked acted and never decided
    // again), j0 is not restarted twice.
    b.pass(20);
    assert_eq!(b.restarts(), 3, "j1 restarted once its cooldown ended");
    b.m.operator();
    b.pass(model::COOLDOWN + 5);
    assert_eq!(b.restarts(), 3, "and nothing restarted twice");
}
