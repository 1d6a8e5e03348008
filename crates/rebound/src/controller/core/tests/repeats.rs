//! A fault line's repeats are dated by when they happened, not by when a
//! controller happened to read them: a repeat concerns the pods that were
//! on the node then, never pods created after it (seed 1592590341: a job
//! restarted for a repeat was restarted again, its new pods taken for the
//! repeat's, because a new leader dated the repeat at its own first sight).

use super::super::input::Input;
use super::bed::Bed;
use super::model::{Kind, Pending};
use serde_json::json;

/// The node of job `j`'s first pod.
fn node_of(b: &Bed, j: &str) -> String {
    let (name, _) = b.pods_of(j)[0].clone();
    b.m.pods[&name]["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A new job `j` whose pods all land on `node`, now.
fn new_job_on(b: &mut Bed, j: &str, node: &str) {
    b.m.create_job(j);
    pods_on(b, j, node);
}

/// The job operator recreates what is missing; `j`'s pods land on `node`.
fn pods_on(b: &mut Bed, j: &str, node: &str) {
    b.m.operator();
    let names: Vec<String> = b.pods_of(j).into_iter().map(|(n, _)| n).collect();
    for n in names {
        if let Some(p) = b.m.pods.get_mut(&n) {
            p["spec"]["nodeName"] = json!(node);
            let p = p.clone();
            b.m.queue_change(Kind::Pods, Pending::Apply(p));
        }
    }
}

fn restarts_of(b: &Bed, j: &str) -> usize {
    b.count(
        |k| matches!(k, super::super::effect::EffectKind::RestartJob { job, .. } if job.name == j),
    )
}

/// An app XID on `node`, then a repeat at `repeat`, read only at `read`
/// (the node watch behind), with job `j2` created on the node at `born`
/// in between. The repeat happened before `j2` existed: `j2` is never
/// restarted for it.
fn a_repeat_read_late(write_last: bool, standby_until_read: bool) -> Bed {
    let mut b = Bed::new(None);
    b.m.write_last = write_last;
    let node = node_of(&b, "j0");
    b.m.node_fault(&node, "13");
    b.pump();
    assert!(
        restarts_of(&b, "j0") >= 1,
        "the first occurrence restarts j0"
    );
    pods_on(&mut b, "j0", &node);
    b.pump();
    if standby_until_read {
        b.feed(vec![Input::Leader(false, 1)]);
    }
    // The repeat happens at 20 (its node change is delivered at once
    // unless the watch is behind).
    b.m.t = 20;
    b.m.node_fault(&node, "13");
    if standby_until_read {
        b.pump();
    }
    // A new job lands on the node at 30.
    b.m.t = 30;
    new_job_on(&mut b, "j2", &node);
    let ins = b.m.deliver(Kind::Pods, 10_000);
    b.feed(ins);
    // At 40 the node is written again (a heartbeat) and read.
    b.m.t = 40;
    b.m.write_node(&node);
    b.pump();
    if standby_until_read {
        b.feed(vec![Input::Leader(true, 2)]);
        b.pump();
    }
    b
}

#[test]
fn a_repeat_read_late_concerns_only_the_pods_that_were_there_when_it_happened() {
    let b = a_repeat_read_late(true, false);
    assert_eq!(
        restarts_of(&b, "j2"),
        0,
        "j2 was created after the repeat happened (the agent's last= says when)"
    );
    // Positive control: the reporter's time is what saved j2; read late
    // without it, the repeat is dated at its first sight.
    let b = a_repeat_read_late(false, false);
    assert_eq!(
        restarts_of(&b, "j2"),
        1,
        "without last=, a late read concerns j2"
    );
}

#[test]
fn a_repeat_keeps_the_time_it_was_first_read_when_its_line_is_rewritten() {
    // A reporter that writes no last=: the repeat is dated when it was
    // read (20, by a standby), and a heartbeat at 40 does not move it, so
    // the take-over at 40 does not take j2 (born at 30) for its victim.
    let b = a_repeat_read_late(false, true);
    assert_eq!(restarts_of(&b, "j2"), 0);
    // Positive control: the same take-over decides the repeat for j0,
    // whose pods were there at 20 (held for j0's cooldown meanwhile).
    let mut b = b;
    b.pass(super::model::COOLDOWN);
    assert!(
        restarts_of(&b, "j0") >= 2,
        "the repeat restarts j0 after its cooldown"
    );
}
