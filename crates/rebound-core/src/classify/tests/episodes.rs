//! History that forgets, and trust domains in the history (issue 27):
//! the three cases a review found, on the shipped classifications.
//!
//! (a) NotReady for 5 min, Ready, then NotReady for 10 s a day later is
//!     brief, as the first one was in its first 2 min.
//! (b) An untrusted NotReady (a tenant's Event, `at` in the past) on the
//!     same node does not age a trusted 5 s NotReady to lasting.
//! (c) One untrusted XID 13 Event on GPU 0, then a genuine XID 13 on GPU 0:
//!     no `ResetDevice` through `app-error-repeats-on-one-gpu`.

use super::*;
use chrono::TimeZone;

fn shipped() -> Classifier {
    let mut loaded = crate::explain::load::Loaded::default();
    for (path, text) in crate::samples::SAMPLES {
        crate::explain::load::load_str(std::path::Path::new(path), text, &mut loaded)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let mut c = Classifier::new();
    for (_, o) in &loaded.classifications {
        let mut o = o.clone();
        o.metadata.generation = Some(1);
        c.upsert(&o)
            .unwrap_or_else(|e| panic!("{}: {e}", o.name_any()));
    }
    c
}

fn day(d: u32, h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, d, h, m, s).unwrap()
}

/// A node's NotReady since `since`, trusted (its Ready condition).
fn not_ready(since: DateTime<Utc>) -> Fault {
    let mut f = Fault::new(FaultSource::NodeCondition, "NotReady", since);
    f.node = Some("gpu-1".into());
    f.trusted = true;
    f
}

/// The same fault copied into a tenant's Event.
fn forged(mut f: Fault) -> Fault {
    f.trusted = false;
    f.namespace = Some("evil".into());
    f
}

fn xid13(at: DateTime<Utc>) -> Fault {
    let mut f = Fault::new(FaultSource::NvidiaXid, "13", at);
    f.node = Some("gpu-1".into());
    f.device = Some("0".into());
    f.trusted = true;
    f
}

#[test]
fn a_not_ready_after_a_long_one_that_cleared_is_brief() {
    let mut c = shipped();
    let first = not_ready(day(1, 10, 0, 0));
    let long = c.classify(first.clone(), None, day(1, 10, 5, 0));
    assert_eq!(long.level, Level::ResetDevice, "5 min NotReady is lasting");
    // Ready again: the core ends the episode when the condition clears.
    c.end_episode(&HistoryKey::of(&first));
    let again = not_ready(day(2, 10, 0, 0));
    let brief = c.classify(again, None, day(2, 10, 0, 10));
    assert_eq!(
        brief.level,
        Level::Ignore,
        "10 s NotReady a day later is brief: {brief:?}"
    );
}

#[test]
fn a_tenants_not_ready_does_not_age_a_trusted_one() {
    let mut c = shipped();
    // A tenant's Event with a NotReady whose `at` is an hour ago.
    let copy = forged(not_ready(day(1, 9, 0, 0)));
    let _ = c.classify(copy, None, day(1, 10, 0, 0));
    let real = c.classify(not_ready(day(1, 10, 0, 0)), None, day(1, 10, 0, 5));
    assert_eq!(
        real.level,
        Level::Ignore,
        "a trusted 5 s NotReady is brief: {real:?}"
    );
    assert_eq!(real.fault.first_seen, day(1, 10, 0, 0));
}

#[test]
fn a_tenants_xid_does_not_count_towards_a_genuine_repeat() {
    let mut c = shipped();
    let copy = forged(xid13(day(1, 10, 0, 0)));
    let _ = c.classify(copy, None, day(1, 10, 0, 0));
    let real = c.classify(xid13(day(1, 10, 1, 0)), None, day(1, 10, 1, 0));
    assert_eq!(real.escalated_by, None, "{real:?}");
    assert_eq!(real.fault.count, 1);
    assert_ne!(real.level, Level::ResetDevice);
    // Two genuine ones still escalate.
    let second = c.classify(xid13(day(1, 10, 2, 0)), None, day(1, 10, 2, 0));
    assert_eq!(second.level, Level::ResetDevice, "{second:?}");
}
