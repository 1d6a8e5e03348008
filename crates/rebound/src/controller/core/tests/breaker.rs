//! The breaker against requests that land late: a cordon whose answer is
//! lost may be applied by the API server well after it was sent (the
//! executor gives up on it only after its timeout), and the watch may show
//! it later still. Found by the adversarial simulation (seed 1592590747).

use super::super::effect::{EffectKind, Outcome};
use super::super::input::Input;
use super::bed::Bed;
use super::model::{self, Kind};

/// Deliver every pending node change to the core (the watch catches up).
fn nodes_caught_up(b: &mut Bed) {
    let ins = b.m.deliver(Kind::Nodes, 10_000);
    b.feed(ins);
}

fn cordon_of(b: &Bed, node: &str) -> Option<usize> {
    b.queue
        .iter()
        .position(|e| matches!(&e.kind, EffectKind::Cordon { node: n, .. } if n == node))
}

#[test]
fn a_cordon_that_lands_late_with_its_answer_lost_still_counts_for_the_breaker() {
    // The model's breaker: 2 nodes in 5 minutes.
    let mut b = Bed::new(None);
    for n in ["n0", "n1", "n2"] {
        b.m.node_fault(n, "79");
    }
    nodes_caught_up(&mut b);
    let (Some(c0), Some(c1)) = (cordon_of(&b, "n0"), cordon_of(&b, "n1")) else {
        panic!("n0 and n1 are cordoned at once: {:?}", b.queue);
    };
    assert!(cordon_of(&b, "n2").is_none(), "n2 is held by the breaker");
    let c0 = b.queue[c0].clone();
    let c1 = b.queue[c1].clone();
    b.queue.clear();
    // n1's fault clears while its cordon is under way: nothing retries it.
    b.m.t = 1;
    b.m.node_clear("n1");
    nodes_caught_up(&mut b);
    // The server applies n1's cordon 59 s after it left; its answer is
    // lost. n0's slow cordon is applied and answered a second later.
    b.m.t = 59;
    let _ = b.m.apply(&c1);
    b.m.t = 60;
    let o = b.m.apply(&c0);
    assert!(matches!(o, Outcome::Ok(_)));
    b.feed(vec![Input::Done(c0.id, o)]);
    // The node watch falls behind; time passes to just past the window of
    // the moment n1's cordon left.
    while b.m.t < model::WINDOW + 5 {
        b.m.t += 1;
        b.feed(vec![Input::Tick]);
        let effects = std::mem::take(&mut b.queue);
        for e in effects {
            let o = b.m.apply(&e);
            b.feed(vec![Input::Done(e.id, o)]);
        }
        assert!(
            b.m.separations_in_window() <= model::MAX_SEPARATED,
            "t={}: {} nodes separated within the window (n1's late cordon not counted)",
            b.m.t,
            b.m.separations_in_window()
        );
    }
    // A positive control: once the window has moved past both cordons,
    // the held separation of n2 is made.
    b.pass(model::WINDOW);
    assert_eq!(
        b.m.nodes["n2"]["spec"]["unschedulable"],
        serde_json::json!(true),
        "the held separation is made when the window allows"
    );
}
