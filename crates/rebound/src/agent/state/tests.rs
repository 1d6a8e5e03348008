use super::*;
use crate::agent::fault::{SOURCE_ASCEND_NPU, SOURCE_NVIDIA_XID};

fn xid(code: &str, dev: &str) -> AgentFault {
    AgentFault {
        family: Accelerator::Gpu,
        source: SOURCE_NVIDIA_XID,
        code: code.into(),
        device: Some(dev.into()),
        reason: "GpuXid",
        message: format!("Xid {code}"),
    }
}

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

fn state(quiet: u64) -> FoldState {
    FoldState::new(FoldConfig {
        quiet_period: Duration::from_secs(quiet),
        ..FoldConfig::default()
    })
}

#[test]
fn a_record_read_again_is_not_a_repeat_and_a_polled_state_never_is() {
    let mut s = state(600);
    assert_eq!(
        s.observe_as(xid("13", "0"), t(10), t(10), true),
        Observed::New
    );
    // A restart rereads the kernel log: the same record, same time.
    s.observe_as(xid("13", "0"), t(10), t(20), true);
    assert_eq!(s.active(Accelerator::Gpu)[0].count, 1);
    // A later record is a repeat.
    s.observe_as(xid("13", "0"), t(30), t(30), true);
    assert_eq!(s.active(Accelerator::Gpu)[0].count, 2);
    // A fault restored from our condition, seen again without a
    // record time (a file read again): the count stays.
    let mut r = state(600);
    r.restore(xid("13", "0"), t(0), 2, None, Some(t(5)), t(10));
    r.observe_as(xid("13", "0"), t(11), t(11), false);
    assert_eq!(r.active(Accelerator::Gpu)[0].count, 2);
    // A polled health state seen on every poll is one occurrence.
    let mut p = state(600);
    let mut health = xid("dcgm-health-pcie", "0");
    health.reason = "DcgmHealthFailure";
    p.observe_as(health.clone(), t(0), t(0), false);
    p.observe_as(health.clone(), t(60), t(60), false);
    p.observe_as(health, t(120), t(120), true);
    assert_eq!(p.active(Accelerator::Gpu)[0].count, 1);
}

#[test]
fn repeats_fold_into_one_fault() {
    let mut s = state(600);
    assert_eq!(s.observe(xid("13", "0"), t(0), t(0)), Observed::New);
    assert_eq!(
        s.observe(xid("13", "0"), t(1), t(1)),
        Observed::Repeat { count: 2 }
    );
    assert_eq!(s.observe(xid("13", "1"), t(2), t(2)), Observed::New);
    assert_eq!(s.len(), 2);
    let c = s.condition(Accelerator::Gpu, "n");
    assert!(c.status);
    assert_eq!(c.reason, "GpuXid13");
    // Each line names its occurrence: first seen, and the count of the
    // repeats folded into it; a repeated one also when its newest repeat
    // happened (a controller that reads it late dates the repeat by it).
    let at = |s: u64| crate::fault::wire::format_at(t(s).into());
    assert_eq!(
        c.message,
        format!(
            "source=NvidiaXid code=13 device=0 at={} n=2 last={} | Xid 13\nsource=NvidiaXid code=13 device=1 at={} n=1 | Xid 13",
            at(0),
            at(1),
            at(2)
        )
    );
    assert!(!s.condition(Accelerator::Npu, "n").status);
}

#[test]
fn quiet_period_clears_per_device() {
    let mut s = state(600);
    s.observe(xid("13", "0"), t(0), t(0));
    s.observe(xid("31", "0"), t(300), t(300));
    s.observe(xid("48", "1"), t(100), t(100));
    assert!(s.expire(t(699)).is_empty());
    let gone = s.expire(t(700));
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].fault.code, "48");
    // Device 0 was seen at 300: both its faults clear together at 900.
    assert!(s.expire(t(899)).is_empty());
    assert_eq!(s.expire(t(900)).len(), 2);
    let c = s.condition(Accelerator::Gpu, "n");
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (false, "GpuHealthy", "")
    );
}

#[test]
fn sticky_codes_never_expire_and_are_never_stale() {
    let mut s = state(60);
    assert_eq!(s.observe(xid("79", "2"), t(0), t(10_000)), Observed::New);
    assert_eq!(s.observe(xid("13", "2"), t(0), t(10_000)), Observed::Stale);
    assert!(s.expire(t(1_000_000)).is_empty());
    assert_eq!(s.condition(Accelerator::Gpu, "n").reason, "GpuXid79");
    assert_eq!(s.next_expiry(), None);
}

#[test]
fn mixed_reasons_and_codes() {
    let mut s = state(600);
    s.observe(xid("13", "0"), t(0), t(0));
    s.observe(xid("31", "0"), t(1), t(1));
    assert_eq!(s.condition(Accelerator::Gpu, "n").reason, "GpuXid");
    let mut sx = xid("20034", "nvswitch0");
    sx.reason = "NvSwitchSXid";
    s.observe(sx, t(2), t(2));
    assert_eq!(s.condition(Accelerator::Gpu, "n").reason, "MultipleFaults");
    let npu = AgentFault {
        family: Accelerator::Npu,
        source: SOURCE_ASCEND_NPU,
        code: "A4025021".into(),
        device: Some("0".into()),
        reason: "NpuFault",
        message: String::new(),
    };
    s.observe(npu, t(3), t(3));
    let c = s.condition(Accelerator::Npu, "n");
    assert_eq!(
        (c.type_, c.reason.as_str()),
        ("NpuFault", "NpuFaultA4025021")
    );
}

#[test]
fn state_is_bounded() {
    let mut s = FoldState::new(FoldConfig {
        max_entries: 4,
        ..FoldConfig::default()
    });
    for i in 0..100u64 {
        s.observe(xid(&i.to_string(), "0"), t(i), t(i));
    }
    assert_eq!(s.len(), 4);
    assert_eq!(s.evicted, 96);
    let codes: Vec<_> = s
        .active(Accelerator::Gpu)
        .iter()
        .map(|e| e.fault.code.clone())
        .collect();
    // The sticky fell-off-the-bus fault is the last one forgotten.
    assert_eq!(codes, ["79", "97", "98", "99"]);
}

#[test]
fn events_are_created_once_and_series_updated_per_interval() {
    let mut s = state(600);
    let fold = Duration::from_secs(60);
    s.observe(xid("13", "0"), t(0), t(0));
    let due = s.events_due(t(0), fold);
    let key = match &due[..] {
        [EventDue::Create { key, count: 1, .. }] => key.clone(),
        other => panic!("{other:?}"),
    };
    s.mark_event(&key, "ev-1".into(), 1, t(0));
    assert!(s.events_due(t(0), fold).is_empty());
    for i in 1..50 {
        s.observe(xid("13", "0"), t(i), t(i));
    }
    assert!(
        s.events_due(t(59), fold).is_empty(),
        "folded within the interval"
    );
    assert_eq!(
        s.events_due(t(60), fold),
        vec![EventDue::Series {
            key: key.clone(),
            name: "ev-1".into(),
            count: 50
        }]
    );
    s.mark_event(&key, "ev-1".into(), 50, t(60));
    assert!(s.events_due(t(500), fold).is_empty(), "no repeat, no write");
}

#[test]
fn same_time_faults_keep_their_arrival_order() {
    let mut s = state(600);
    s.restore(xid("79", "3"), t(0), 1, None, None, t(0));
    s.restore(xid("20034", "nvswitch1"), t(0), 1, None, None, t(0));
    let codes: Vec<_> = s
        .active(Accelerator::Gpu)
        .iter()
        .map(|e| e.fault.code.clone())
        .collect();
    assert_eq!(codes, ["79", "20034"]);
}

#[test]
fn restored_faults_make_no_event_and_clear_after_quiet() {
    let mut s = state(600);
    s.restore(xid("13", "0"), t(0), 1, None, None, t(0));
    assert!(s.events_due(t(0), Duration::from_secs(60)).is_empty());
    assert!(s.condition(Accelerator::Gpu, "n").status);
    assert_eq!(s.expire(t(600)).len(), 1);
}
