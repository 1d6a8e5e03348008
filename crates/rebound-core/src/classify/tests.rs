use super::*;
use crate::api::{ClassificationRule, EscalationRule, FaultClassificationSpec};
use chrono::TimeZone;

fn t(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, h, m, 0).unwrap()
}

fn rule(name: &str, codes: &[&str], level: Level) -> ClassificationRule {
    ClassificationRule {
        name: name.into(),
        codes: codes.iter().map(|s| s.to_string()).collect(),
        when: None,
        level,
        description: None,
    }
}

fn fc(
    name: &str,
    source: FaultSource,
    priority: i32,
    rules: Vec<ClassificationRule>,
) -> FaultClassification {
    let mut o = FaultClassification::new(
        name,
        FaultClassificationSpec {
            source,
            priority,
            rules,
            escalations: vec![],
            default_level: None,
        },
    );
    o.metadata.generation = Some(1);
    o
}

fn xid(code: &str, node: &str, dev: &str, at: DateTime<Utc>) -> Fault {
    let mut f = Fault::new(FaultSource::NvidiaXid, code, at);
    f.node = Some(node.into());
    f.device = Some(dev.into());
    f
}

fn xid_classifier() -> Classifier {
    let mut o = fc(
        "nvidia-xid",
        FaultSource::NvidiaXid,
        100,
        vec![
            rule("fell-off-bus", &["79"], Level::Separate),
            rule("ecc", &["48", "63", "64", "94", "95"], Level::ResetDevice),
            rule("nvlink5", &["144-150"], Level::ResetDevice),
            rule("app", &["13", "31", "43", "45", "68"], Level::Ignore),
            ClassificationRule {
                when: Some(r#"fault.code == "74" && fault.count >= 3"#.into()),
                ..rule("nvlink-flapping", &[], Level::Separate)
            },
        ],
    );
    o.spec.escalations = vec![
        EscalationRule {
            name: Some("app-repeats".into()),
            codes: vec!["13".into(), "31".into()],
            times: Some(2),
            within: Some("24h".into()),
            lasts_for: None,
            level: Level::ResetDevice,
        },
        EscalationRule {
            name: Some("lasting".into()),
            codes: vec!["119".into()],
            times: None,
            within: None,
            lasts_for: Some("20s".into()),
            level: Level::PreSeparate,
        },
    ];
    o.spec.default_level = Some(Level::RestartJob);
    let mut c = Classifier::new();
    c.upsert(&o).expect("valid");
    c
}

#[test]
fn each_level_from_rules_and_default() {
    let mut c = xid_classifier();
    let at = t(10, 0);
    assert_eq!(
        c.classify(xid("79", "n1", "0", at), None, at).level,
        Level::Separate
    );
    assert_eq!(
        c.classify(xid("48", "n1", "1", at), None, at).level,
        Level::ResetDevice
    );
    assert_eq!(
        c.classify(xid("145", "n1", "2", at), None, at).level,
        Level::ResetDevice
    );
    assert_eq!(
        c.classify(xid("13", "n1", "3", at), None, at).level,
        Level::Ignore
    );
    let d = c.classify(xid("999", "n1", "3", at), None, at);
    assert_eq!(d.level, Level::RestartJob);
    assert_eq!(d.rule, "nvidia-xid/defaultLevel");
    assert_eq!(
        c.in_use()
            .next()
            .map(|o| o.classified.load(std::sync::atomic::Ordering::Relaxed)),
        Some(5)
    );
}

#[test]
fn app_xid_twice_on_one_gpu_escalates_but_not_on_two_gpus() {
    let mut c = xid_classifier();
    let first = c.classify(xid("13", "n1", "0", t(1, 0)), None, t(1, 0));
    assert_eq!(first.level, Level::Ignore);
    let other_gpu = c.classify(xid("13", "n1", "1", t(2, 0)), None, t(2, 0));
    assert_eq!(other_gpu.level, Level::Ignore, "two GPUs: no escalation");
    let again = c.classify(xid("13", "n1", "0", t(3, 0)), None, t(3, 0));
    assert_eq!(again.level, Level::ResetDevice);
    assert_eq!(
        again.escalated_by.as_deref(),
        Some("nvidia-xid/app-repeats")
    );
    assert_eq!(again.fault.count, 2);
}

#[test]
fn repeats_outside_the_window_do_not_escalate_and_replays_do_not_count() {
    let mut c = xid_classifier();
    let day1 = Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap();
    let day3 = Utc.with_ymd_and_hms(2026, 11, 3, 0, 0, 0).unwrap();
    c.classify(xid("31", "n1", "0", day1), None, day1);
    assert_eq!(
        c.classify(xid("31", "n1", "0", day3), None, day3).level,
        Level::Ignore
    );
    // The same occurrence seen again (watch replay) is not a repeat.
    assert_eq!(
        c.classify(xid("31", "n1", "0", day3), None, day3).level,
        Level::Ignore
    );
}

#[test]
fn lasting_fault_escalates_by_duration() {
    let mut c = xid_classifier();
    let mut f = xid("119", "n1", "0", t(10, 1));
    f.first_seen = t(10, 0);
    let d = c.classify(f, None, t(10, 1));
    assert_eq!(d.level, Level::PreSeparate);
    assert_eq!(d.escalated_by.as_deref(), Some("nvidia-xid/lasting"));
}

#[test]
fn cel_rules_see_the_count() {
    let mut c = xid_classifier();
    for m in 0..2 {
        let d = c.classify(xid("74", "n1", "0", t(5, m)), None, t(5, m));
        assert_eq!(d.level, Level::RestartJob, "count {}", m + 1);
    }
    let d = c.classify(xid("74", "n1", "0", t(5, 2)), None, t(5, 2));
    assert_eq!(d.level, Level::Separate);
    assert_eq!(d.rule, "nvidia-xid/nvlink-flapping");
}

#[test]
fn higher_priority_object_overrides_and_default_is_builtin_without_objects() {
    let mut c = xid_classifier();
    c.upsert(&fc(
        "site-override",
        FaultSource::NvidiaXid,
        200,
        vec![rule("79-only-reset", &["79"], Level::ResetDevice)],
    ))
    .unwrap();
    let d = c.classify(xid("79", "n1", "0", t(1, 0)), None, t(1, 0));
    assert_eq!(d.level, Level::ResetDevice);
    assert_eq!(d.rule, "site-override/79-only-reset");
    // Codes the override does not know still fall through to the base.
    assert_eq!(
        c.classify(xid("48", "n1", "0", t(1, 0)), None, t(1, 0))
            .level,
        Level::ResetDevice
    );
    let at = t(1, 0);
    let d = c.classify(Fault::new(FaultSource::PodExit, "1", at), None, at);
    assert_eq!(
        (d.level, d.rule.as_str()),
        (BUILTIN_DEFAULT, "builtin-default")
    );
}

#[test]
fn hex_codes_classify_for_ascend() {
    let mut c = Classifier::new();
    c.upsert(&fc(
        "ascend",
        FaultSource::AscendNpu,
        0,
        vec![
            rule("sep", &["80E18402"], Level::Separate),
            rule("hbm", &["0x80C98000-0x80C98FFF"], Level::ResetDevice),
        ],
    ))
    .unwrap();
    let at = t(1, 0);
    assert_eq!(
        c.classify(
            Fault::new(FaultSource::AscendNpu, "0x80e18402", at),
            None,
            at
        )
        .level,
        Level::Separate
    );
    assert_eq!(
        c.classify(Fault::new(FaultSource::AscendNpu, "80C98008", at), None, at)
            .level,
        Level::ResetDevice
    );
}

#[test]
fn invalid_objects_are_refused_with_the_field_and_not_used() {
    let mut c = xid_classifier();
    let mut bad = fc(
        "broken",
        FaultSource::NvidiaXid,
        500,
        vec![rule("r", &["79"], Level::Ignore)],
    );
    bad.spec.rules[0].when = Some("fault.code ==".into());
    let e = c.upsert(&bad).unwrap_err();
    assert_eq!(e.field, "spec.rules[0].when");
    assert_eq!(e.reason, "InvalidExpression");
    assert!(c.invalid("broken").is_some());
    // Not in use: XID 79 is still Separate.
    assert_eq!(
        c.classify(xid("79", "n", "0", t(1, 0)), None, t(1, 0))
            .level,
        Level::Separate
    );

    let mut bad = fc(
        "expensive",
        FaultSource::NvidiaXid,
        500,
        vec![rule("r", &["79"], Level::Ignore)],
    );
    let mut nested = "a0 < a5".to_string();
    for d in (0..6).rev() {
        nested = format!("node.faults.all(a{d}, {nested})");
    }
    bad.spec.rules[0].when = Some(nested);
    let e = c.upsert(&bad).unwrap_err();
    assert_eq!(e.reason, "ExpressionTooExpensive", "{e}");
    assert!(e.message.contains("estimated worst-case cost"), "{e}");
    assert_eq!(
        c.classify(xid("79", "n", "0", t(1, 0)), None, t(1, 0))
            .level,
        Level::Separate,
        "a refused classification is not used"
    );

    let mut bad = fc("bad-dur", FaultSource::NvidiaXid, 1, vec![]);
    bad.spec.escalations = vec![EscalationRule {
        name: None,
        codes: vec!["13".into()],
        times: Some(2),
        within: Some("a day".into()),
        lasts_for: None,
        level: Level::Separate,
    }];
    let e = c.upsert(&bad).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.reason),
        ("spec.escalations[0].within", "InvalidDuration")
    );
}

#[test]
fn cel_errors_are_counted_as_no_match() {
    let mut c = Classifier::new();
    let mut o = fc("e", FaultSource::NvidiaXid, 0, vec![]);
    o.spec.rules = vec![ClassificationRule {
        when: Some("fault.code / 2 == 1".into()),
        ..rule("bad", &[], Level::Separate)
    }];
    c.upsert(&o).unwrap();
    let at = t(1, 0);
    let d = c.classify(xid("79", "n", "0", at), None, at);
    assert_eq!(d.level, BUILTIN_DEFAULT);
    assert_eq!(c.stats().cel_errors, 1);
}

mod episodes;
