use super::super::fault::Accelerator;
use super::super::report::{ExistingCondition, timestamp};
use super::super::state::FoldConfig;
use super::*;
use crate::fault::wire::WireFault;
use crate::fault::wire::format_condition_message;

#[test]
fn restore_skips_conditions_from_before_boot() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let boot = now - Duration::from_secs(3600);
    let wire = WireFault {
        source: "NvidiaXid".into(),
        code: "20034".into(),
        device: Some("nvswitch0".into()),
        ..WireFault::default()
    };
    let cond = |hb: SystemTime| ExistingCondition {
        family: Accelerator::Gpu,
        status: true,
        faults: vec![wire.clone()],
        last_heartbeat: Some(timestamp(hb)),
        last_transition: None,
    };
    let mut s = FoldState::new(FoldConfig::default());
    restore(
        &mut s,
        &[cond(boot - Duration::from_secs(1))],
        Some(boot),
        now,
    );
    assert!(s.is_empty());
    restore(
        &mut s,
        &[cond(boot + Duration::from_secs(1))],
        Some(boot),
        now,
    );
    let c = s.condition(Accelerator::Gpu, "n");
    assert_eq!(c.reason, "NvSwitchSXid20034");
    // A line without the occurrence time gets the restore's; one with
    // it keeps it, so the controller sees the same occurrence.
    let mut expected = wire.clone();
    expected.node = Some("n".into());
    expected.at = Some(crate::fault::wire::format_at(now.into()));
    expected.count = Some(1);
    assert_eq!(c.message, format_condition_message(&[expected]));
    let first = now - Duration::from_secs(600);
    let mut s = FoldState::new(FoldConfig::default());
    let mut old = wire.clone();
    old.at = Some(crate::fault::wire::format_at(first.into()));
    old.count = Some(3);
    // The newest repeat's time is kept too.
    old.last = Some(crate::fault::wire::format_at(
        (first + Duration::from_secs(60)).into(),
    ));
    let cond = ExistingCondition {
        family: Accelerator::Gpu,
        status: true,
        faults: vec![old.clone()],
        last_heartbeat: Some(timestamp(now)),
        last_transition: None,
    };
    restore(&mut s, &[cond], Some(boot), now);
    let c = s.condition(Accelerator::Gpu, "n");
    old.node = Some("n".into());
    assert_eq!(c.message, format_condition_message(&[old]));
}

#[test]
fn unknown_sources_are_not_restored() {
    let w = WireFault {
        source: "KubeEvent".into(),
        code: "x".into(),
        ..WireFault::default()
    };
    assert_eq!(restored_fault(&w), None);
}
