use super::*;
use crate::fault::{Fault, FaultSource, Level};
use chrono::{TimeZone, Utc};

fn vars(restarts: i64) -> Vars {
    let now = Utc.with_ymd_and_hms(2026, 11, 28, 10, 0, 0).unwrap();
    let mut f = Fault::new(FaultSource::NvidiaXid, "74", now);
    f.count = 3;
    f.node = Some("gpu-7".into());
    let job = JobView {
        kind: "PyTorchJob".into(),
        name: "llm".into(),
        restarts,
        ..Default::default()
    };
    Vars::new(&f, Some(Level::ResetDevice), Some(&job), None, now)
}

#[test]
fn integers_are_int_not_uint() {
    let e = Expr::compile("job.restarts + 1 == 3", POLICY_VARS).unwrap();
    assert!(e.eval_bool(&vars(2)).unwrap());
    let j = json_to_value(&serde_json::json!({"restarts": 2}));
    let cel::Value::Map(m) = j else { panic!("map") };
    assert!(matches!(
        m.map.get(&cel::objects::Key::from("restarts")),
        Some(cel::Value::Int(2))
    ));
}

#[test]
fn fault_fields_and_durations() {
    let v = vars(5);
    let gate = Expr::compile(r#"fault.code == "74" && fault.count >= 3"#, CLASSIFY_VARS).unwrap();
    assert!(gate.eval_bool(&v).unwrap());
    let cd = Expr::compile(
        r#"job.restarts < 3 ? duration("30s") : duration("5m")"#,
        POLICY_VARS,
    )
    .unwrap();
    assert_eq!(cd.eval_duration(&v).unwrap(), Duration::from_secs(300));
    assert_eq!(cd.eval_duration(&vars(1)).unwrap(), Duration::from_secs(30));
}

#[test]
fn weekday_and_timestamps_work() {
    // 2026-11-28 is a Saturday: getDayOfWeek() is 0 for Sunday.
    let e = Expr::compile("now.getDayOfWeek() == 6", POLICY_VARS).unwrap();
    assert!(e.eval_bool(&vars(0)).unwrap());
    let e = Expr::compile(r#"now - job.lastRestart > duration("1h")"#, POLICY_VARS).unwrap();
    assert!(e.eval_bool(&vars(0)).unwrap());
}

#[test]
fn unknown_variables_are_rejected_at_compile_time() {
    let err = Expr::compile("pod.name == 'x'", POLICY_VARS).unwrap_err();
    assert!(matches!(err, CompileError::UnknownVariable { ref name, .. } if name == "pod"));
    let err = Expr::compile("job.restarts > 1", CLASSIFY_VARS).unwrap_err();
    assert!(err.to_string().contains("job"), "{err}");
}

#[test]
fn comprehensions_may_bind_their_own_variables() {
    let e = Expr::compile(r#"node.faults.exists(f, f == "79")"#, POLICY_VARS).unwrap();
    assert!(!e.eval_bool(&vars(0)).unwrap());
}

#[test]
fn syntax_errors_and_limits_are_clear() {
    let err = Expr::compile("fault.code == ", POLICY_VARS).unwrap_err();
    assert!(matches!(err, CompileError::Syntax(_)));
    let long = format!("fault.code == \"{}\"", "x".repeat(MAX_EXPRESSION_LEN));
    assert!(matches!(
        Expr::compile(&long, POLICY_VARS),
        Err(CompileError::TooLong { .. })
    ));
}

#[test]
fn evaluation_errors_are_errors_not_panics() {
    let e = Expr::compile("fault.nosuchfield == 1", POLICY_VARS).unwrap();
    assert!(e.eval_bool(&vars(0)).is_err());
    let e = Expr::compile("fault.code", POLICY_VARS).unwrap();
    assert!(matches!(
        e.eval_bool(&vars(0)),
        Err(EvalError::WrongType { .. })
    ));
}
