//! Cases the property test found, kept as plain tests so that they run
//! whatever proptest's random seeds are.

use super::*;

/// Runs `ops` on wired pods with `tiers` (checking the invariants after
/// each), settles, and checks that every job's generation is released.
fn replay(ops: &[Op], tiers: &[&str]) {
    let mut r = Run::new(Some(tiers));
    for o in ops {
        r.op(o);
    }
    r.settle();
    for name in r.m.jobs.keys() {
        let (current, released) = r.m.released(name);
        assert_eq!(
            current, released,
            "job {name}: generation {current} never released"
        );
    }
}

/// Found by the property test (2026-12-04, in place alone): a release whose
/// job was recreated meanwhile (the uid precondition fails, `Gone`) left
/// the core with the old job's raised generation and nothing owing its
/// release, until the watch showed the recreation. The release now stays
/// owed, retried after a backoff, until the watch shows the job as it is.
#[test]
fn a_release_answered_gone_stays_owed_until_the_watch_shows_the_job() {
    let ops = vec![
        Op::NodeFault { node: 3, code: 1 },
        Op::NodeFault { node: 3, code: 1 },
        Op::Leader(0),
        Op::Duplicate { kind: 2 },
        Op::Tick { secs: 4 },
        Op::NodeClear { node: 2 },
        Op::Tick { secs: 12 },
        Op::Complete { i: 205, ok: true },
        Op::Deliver { kind: 0, n: 3 },
        Op::Complete { i: 110, ok: true },
        Op::Complete { i: 141, ok: true },
        Op::Agents { reach: false },
        Op::Deliver { kind: 1, n: 1 },
        Op::Agents { reach: true },
        Op::Deliver { kind: 1, n: 5 },
        Op::Deliver { kind: 0, n: 3 },
        Op::Complete { i: 203, ok: true },
        Op::FailPod { i: 158 },
        Op::Leader(1),
        Op::FailPod { i: 129 },
        Op::FailPod { i: 47 },
        Op::Restart { sent: 59 },
        Op::FailPod { i: 247 },
        Op::RecreateJob { j: 0 },
        Op::NodeClear { node: 2 },
        Op::FailPod { i: 181 },
        Op::RecreateJob { j: 0 },
        Op::Leader(0),
        Op::NodeClear { node: 1 },
        Op::Deliver { kind: 0, n: 1 },
        Op::NodeFault { node: 1, code: 1 },
        Op::Deliver { kind: 1, n: 1 },
        Op::Leader(2),
        Op::Operator,
        Op::Operator,
        Op::Complete { i: 74, ok: true },
        Op::Operator,
        Op::Leader(1),
        Op::Agents { reach: true },
        Op::Lose { i: 10 },
        Op::Leader(1),
        Op::Tick { secs: 36 },
        Op::Operator,
        Op::FailPod { i: 151 },
        Op::Deliver { kind: 1, n: 2 },
        Op::Complete { i: 81, ok: true },
        Op::Complete { i: 245, ok: false },
        Op::Operator,
        Op::Operator,
        Op::Leader(1),
        Op::Tick { secs: 20 },
        Op::Agents { reach: false },
        Op::Operator,
        Op::RecreateJob { j: 0 },
        Op::Deliver { kind: 1, n: 2 },
        Op::Deliver { kind: 0, n: 4 },
        Op::Complete { i: 95, ok: true },
        Op::Tick { secs: 33 },
        Op::Relist { kind: 2 },
        Op::NodeFault { node: 3, code: 2 },
        Op::Tick { secs: 19 },
        Op::Deliver { kind: 1, n: 3 },
        Op::Agents { reach: true },
        Op::NodeFault { node: 3, code: 2 },
        Op::Deliver { kind: 1, n: 5 },
        Op::Tick { secs: 32 },
        Op::Agents { reach: false },
        Op::Restart { sent: 25 },
        Op::Operator,
        Op::Deliver { kind: 1, n: 1 },
        Op::Operator,
        Op::Duplicate { kind: 2 },
        Op::Tick { secs: 31 },
        Op::Operator,
        Op::Deliver { kind: 1, n: 3 },
        Op::Deliver { kind: 2, n: 4 },
        Op::Relist { kind: 2 },
        Op::Complete { i: 88, ok: false },
        Op::Agents { reach: true },
        Op::Complete { i: 129, ok: true },
        Op::Deliver { kind: 0, n: 2 },
        Op::Deliver { kind: 1, n: 2 },
        Op::Complete { i: 10, ok: true },
        Op::FailPod { i: 210 },
        Op::Deliver { kind: 0, n: 2 },
        Op::Complete { i: 60, ok: true },
        Op::Deliver { kind: 0, n: 4 },
        Op::Complete { i: 249, ok: true },
        Op::Operator,
        Op::Complete { i: 181, ok: true },
        Op::Complete { i: 185, ok: true },
        Op::Tick { secs: 1 },
        Op::Leader(0),
        Op::Deliver { kind: 0, n: 4 },
    ];
    replay(&ops, &["InPlace"]);
}

/// Found by the property test (2026-12-06, in place with fallbacks): a
/// recovery whose job was deleted (and made anew under its name) ended on
/// its record answered `Gone`; with the job no longer in the store, the
/// raised generation this process had written on the old job stayed in
/// its memory, owed by nothing. A job that is gone now takes that memory
/// with it.
#[test]
fn a_recovery_of_a_deleted_job_leaves_no_raised_generation_behind() {
    let ops = vec![
        Op::RecreateJob { j: 1 },
        Op::Complete { i: 31, ok: true },
        Op::Tick { secs: 5 },
        Op::Tick { secs: 19 },
        Op::FailPod { i: 210 },
        Op::FailPod { i: 143 },
        Op::Deliver { kind: 1, n: 3 },
        Op::Agents { reach: false },
        Op::Operator,
        Op::FailPod { i: 56 },
        Op::Agents { reach: true },
        Op::Agents { reach: false },
        Op::Agents { reach: true },
        Op::FailPod { i: 15 },
        Op::FailPod { i: 117 },
        Op::Deliver { kind: 0, n: 4 },
        Op::Deliver { kind: 0, n: 5 },
        Op::Operator,
        Op::Agents { reach: false },
        Op::Complete { i: 130, ok: true },
        Op::NodeClear { node: 2 },
        Op::NodeClear { node: 0 },
        Op::RecreateJob { j: 0 },
        Op::Tick { secs: 18 },
        Op::Agents { reach: true },
        Op::Agents { reach: false },
        Op::NodeClear { node: 0 },
        Op::Complete { i: 68, ok: true },
        Op::Complete { i: 249, ok: true },
        Op::Lose { i: 110 },
        Op::Duplicate { kind: 1 },
        Op::Deliver { kind: 2, n: 1 },
        Op::FailPod { i: 209 },
        Op::Complete { i: 187, ok: true },
        Op::Agents { reach: true },
        Op::FailPod { i: 246 },
        Op::Deliver { kind: 0, n: 1 },
        Op::Duplicate { kind: 2 },
        Op::NodeFault { node: 0, code: 0 },
        Op::Complete { i: 6, ok: true },
        Op::Tick { secs: 31 },
        Op::Agents { reach: false },
        Op::RecreateJob { j: 1 },
        Op::FailPod { i: 116 },
        Op::Complete { i: 95, ok: true },
        Op::Agents { reach: true },
        Op::Tick { secs: 16 },
        Op::Operator,
        Op::Deliver { kind: 0, n: 3 },
        Op::Complete { i: 79, ok: true },
        Op::FailPod { i: 48 },
        Op::FailPod { i: 202 },
        Op::Operator,
        Op::Agents { reach: true },
        Op::Complete { i: 14, ok: true },
        Op::Deliver { kind: 2, n: 1 },
        Op::Deliver { kind: 1, n: 4 },
        Op::Relist { kind: 2 },
        Op::NodeFault { node: 3, code: 2 },
        Op::NodeFault { node: 1, code: 0 },
        Op::Duplicate { kind: 0 },
        Op::Complete { i: 88, ok: true },
        Op::Deliver { kind: 2, n: 1 },
        Op::FailPod { i: 192 },
        Op::Deliver { kind: 0, n: 2 },
        Op::Relist { kind: 0 },
        Op::Complete { i: 240, ok: false },
        Op::Deliver { kind: 0, n: 5 },
        Op::Complete { i: 108, ok: true },
        Op::Deliver { kind: 2, n: 5 },
        Op::Agents { reach: true },
        Op::Tick { secs: 25 },
        Op::Leader(1),
        Op::Deliver { kind: 1, n: 4 },
        Op::Relist { kind: 1 },
        Op::NodeRewrite { node: 3 },
        Op::Agents { reach: false },
        Op::Tick { secs: 13 },
        Op::Agents { reach: true },
        Op::NodeRewrite { node: 1 },
        Op::FailPod { i: 119 },
        Op::Duplicate { kind: 0 },
        Op::Leader(1),
        Op::Deliver { kind: 0, n: 5 },
        Op::Agents { reach: true },
    ];
    replay(&ops, &["InPlace", "ReplaceFaulty", "Recreate"]);
}
