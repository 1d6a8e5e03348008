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
fn unknown_fields_of_known_variables_are_rejected_at_compile_time() {
    let err = Expr::compile("job.restartz < 3", POLICY_VARS).unwrap_err();
    assert!(
        matches!(err, CompileError::UnknownField { ref var, ref field, .. } if var == "job" && field == "restartz"),
        "{err}"
    );
    assert!(
        err.to_string().contains("restarts"),
        "the message lists the fields: {err}"
    );
    for bad in [
        "fault.cod == '79'",
        "has(node.levels)",
        "node.faults.exists(f, fault.nodes == f)",
    ] {
        assert!(Expr::compile(bad, POLICY_VARS).is_err(), "{bad}");
    }
    // A comprehension's own variable and map keys are not fields of ours.
    for ok in [
        r#"node.faults.exists(job, job == "79")"#,
        r#"job.labels["team"] == "a" && job.labels.team == "a""#,
        "fault.count >= 3 && has(job.annotations)",
    ] {
        assert!(Expr::compile(ok, POLICY_VARS).is_ok(), "{ok}");
    }
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
    // A field that is not there is refused at compile time; one reached
    // by index fails at evaluation, as an error.
    let e = Expr::compile(r#"fault["nosuchfield"] == 1"#, POLICY_VARS).unwrap();
    assert!(e.eval_bool(&vars(0)).is_err());
    let e = Expr::compile("fault.code", POLICY_VARS).unwrap();
    assert!(matches!(
        e.eval_bool(&vars(0)),
        Err(EvalError::WrongType { .. })
    ));
}

/// The lazy views of the hot path answer every expression as the eager
/// maps do: same values, same errors, same map behaviour.
#[test]
fn views_answer_as_eager_maps_do() {
    let now = Utc.with_ymd_and_hms(2026, 11, 28, 10, 0, 0).unwrap();
    let mut f = Fault::new(FaultSource::PodExit, "137", now);
    f.count = 2;
    f.exit_code = Some(137);
    f.reason = Some("OOMKilled".into());
    f.node = Some("gpu-7".into());
    let job = JobView {
        kind: "PyTorchJob".into(),
        name: "llm".into(),
        namespace: "team-a".into(),
        labels: [("team".to_string(), "a".to_string())].into(),
        restarts: 4,
        last_restart: Some(now - chrono::Duration::minutes(10)),
        replicas: 8,
        ..Default::default()
    };
    let node = NodeView {
        name: "gpu-7".into(),
        level: Some(Level::PreSeparate),
        faults: vec!["79".into(), "48".into()],
        ..Default::default()
    };
    let level = Some(Level::RestartJob);
    let eager = Scope::new(&Vars::new(&f, level, Some(&job), Some(&node), now));
    let all = VarSet {
        fault: true,
        job: true,
        node: true,
        now: true,
    };
    let lazy = Scope::build(all, &f, level, Some(&job), Some(&node), now);
    let empty_lazy = Scope::build(all, &f, None, None, None, now);
    let empty_eager = Scope::new(&Vars::new(&f, None, None, None, now));
    let exprs = [
        r#"fault.code == "137" && fault.exitCode == 137 && fault.reason == "OOMKilled""#,
        r#"fault.level == "RestartJob" && fault.count + 1 == 3"#,
        r#"fault.source == "PodExit" && fault.device == "" && fault.pod == """#,
        r#"now - fault.firstSeen < duration("1m") && fault.lastSeen <= now"#,
        r#"job.restarts >= 4 && job.replicas == 8 && job.labels["team"] == "a""#,
        r#"has(job.labels.team) && !has(job.labels.other) && "team" in job.labels"#,
        r#"now - job.lastRestart > duration("5m")"#,
        r#"job.kind == "PyTorchJob" && size(job.annotations) == 0"#,
        r#"node.level == "PreSeparate" && "79" in node.faults && size(node.faults) == 2"#,
        r#"node.faults.exists(c, c == "48") && node.faults.all(c, c != "13")"#,
        r#"has(fault.code) && !("nosuch" in fault) && "code" in fault && !("x" in fault)"#,
        r#"size(fault) == 14 && size(job) == 8 && size(node) == 4"#,
        r#"fault.exists(k, k == "exitCode") && job.all(k, k != "")"#,
        r#"job.labels.exists(k, k == "team")"#,
        r#"fault["nosuch"] == 1"#,
        r#"job.labels["missing"] == "x""#,
        r#"fault[1] == 1"#,
        r#"job.name"#,
    ];
    for src in exprs {
        // Iterating labels is refused by the cost bound; the views must
        // still iterate as maps do.
        let e = Expr::compile_unbounded(src, POLICY_VARS).unwrap();
        let (a, b) = (e.eval_bool_in(&eager), e.eval_bool_in(&lazy));
        assert_eq!(a.is_ok(), b.is_ok(), "{src}: eager {a:?}, lazy {b:?}");
        assert_eq!(a.as_ref().ok(), b.as_ref().ok(), "{src}");
        let (a, b) = (e.eval_bool_in(&empty_eager), e.eval_bool_in(&empty_lazy));
        assert_eq!(a.as_ref().ok(), b.as_ref().ok(), "{src} (no job, no node)");
    }
    // The answers are not all the same, so the comparison means something.
    let truthy = |src: &str| {
        Expr::compile(src, POLICY_VARS)
            .unwrap()
            .eval_bool_in(&lazy)
            .unwrap()
    };
    assert!(truthy(exprs[0]) && truthy(exprs[5]) && truthy(exprs[12]));
    assert!(!truthy(r#"job.restarts > 4"#));
    let cd = Expr::compile(r#"job.restarts > 3 ? duration("5m") : 30"#, POLICY_VARS).unwrap();
    assert_eq!(
        cd.eval_duration_in(&lazy).unwrap(),
        Duration::from_secs(300)
    );
    assert_eq!(
        cd.eval_duration_in(&empty_lazy).unwrap(),
        Duration::from_secs(30)
    );
}

// --- cost bound ---

/// `[0, …, n-1]`.
fn range(n: usize) -> String {
    let xs: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!("[{}]", xs.join(", "))
}

/// `depth` nested `all` over `[0, …, n-1]`, the innermost comparing the
/// outermost and innermost variables.
fn nested(depth: usize, n: usize) -> String {
    let mut body = format!("v0 <= v{}", depth - 1);
    for d in (0..depth).rev() {
        body = format!("{}.all(v{d}, {body})", range(n));
    }
    body
}

fn estimate_of(src: &str) -> u64 {
    let p = cel::Env::stdlib().compile(src).expect("parses");
    cost::estimate(p.expression())
}

#[test]
fn ten_nested_comprehensions_are_refused_with_their_estimate() {
    let src = nested(10, 10);
    assert!(src.len() < 600, "a few hundred bytes: {}", src.len());
    let err = Expr::compile(&src, POLICY_VARS).expect_err("10^10 steps refused");
    let CompileError::TooExpensive { estimate, limit } = err.clone() else {
        panic!("wrong error: {err}");
    };
    assert!(estimate >= 10_000_000_000, "estimate {estimate}");
    assert_eq!(limit, cost::MAX_COST);
    let msg = err.to_string();
    assert!(msg.contains(&estimate.to_string()), "{msg}");
    assert!(msg.contains(&cost::MAX_COST.to_string()), "{msg}");
    assert_eq!(err.reason(), "ExpressionTooExpensive");
    // Also as a classification rule.
    assert!(matches!(
        Expr::compile(&src, CLASSIFY_VARS),
        Err(CompileError::TooExpensive { .. })
    ));
}

#[test]
fn every_shipped_sample_expression_is_well_under_the_bound() {
    let mut loaded = crate::explain::load::Loaded::default();
    for (path, text) in crate::samples::SAMPLES {
        crate::explain::load::load_str(std::path::Path::new(path), text, &mut loaded)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let mut exprs: Vec<(&str, &[&str])> = Vec::new();
    for (_, p) in &loaded.policies {
        exprs.extend(p.spec.when.as_deref().map(|w| (w, POLICY_VARS)));
        if let Some(c) = p.spec.cooldown.as_deref()
            && crate::api::duration::parse(c).is_err()
        {
            exprs.push((c, POLICY_VARS));
        }
    }
    for (_, c) in &loaded.classifications {
        for r in &c.spec.rules {
            exprs.extend(r.when.as_deref().map(|w| (w, CLASSIFY_VARS)));
        }
    }
    assert!(exprs.len() >= 8, "samples have CEL: {}", exprs.len());
    for (src, vars) in exprs {
        let e = Expr::compile(src, vars).unwrap_or_else(|err| panic!("`{src}`: {err}"));
        assert!(
            e.cost() < cost::MAX_COST / 5,
            "`{src}` costs {} of {}",
            e.cost(),
            cost::MAX_COST
        );
    }
}

#[test]
fn an_expression_just_under_the_bound_is_accepted_and_one_just_over_refused() {
    // The largest n for which two nested `all` over n elements fit.
    let n = (1..400)
        .take_while(|n| estimate_of(&nested(2, *n)) <= cost::MAX_COST)
        .last()
        .expect("some n fits");
    let under = nested(2, n);
    let e = Expr::compile(&under, POLICY_VARS).expect("just under the bound");
    assert!(
        e.cost() > cost::MAX_COST * 9 / 10,
        "borderline: {} of {}",
        e.cost(),
        cost::MAX_COST
    );
    assert!(e.eval_bool(&vars(0)).is_ok());
    let over = nested(2, n + 1);
    assert!(matches!(
        Expr::compile(&over, POLICY_VARS),
        Err(CompileError::TooExpensive { estimate, .. }) if estimate > cost::MAX_COST
    ));
}

#[test]
fn the_estimate_grows_with_nesting() {
    // Each level of nesting multiplies, at least by its range.
    let mut last = 0;
    for depth in 1..=6 {
        let e = estimate_of(&nested(depth, 4));
        assert!(e >= last * 4, "depth {depth}: {e} after {last}");
        last = e;
    }
    // Wrapping any expression never makes it cheaper.
    for inner in [
        "fault.message.contains('x')",
        "node.faults.exists(f, f.matches('^8'))",
        "job.restarts < 3",
        &nested(2, 5),
    ] {
        let e = estimate_of(inner);
        for outer in [
            format!("true && ({inner})"),
            format!("({inner}) ? 1 : 2"),
            format!("[1, 2].exists(z, {inner})"),
            format!("[1].map(z, {inner}).size() > 0"),
            format!("!({inner})"),
        ] {
            assert!(estimate_of(&outer) > e, "`{outer}` below `{inner}`");
        }
    }
}

#[test]
fn variables_are_sized_by_their_documented_bounds() {
    // Lookups are cheap; iterating labels or annotations (262,144 entries
    // at most) is refused.
    for ok in [
        r#""team" in job.labels && job.labels["team"] == "llm""#,
        r#"job.annotations["a"].startsWith("x")"#,
        r#"node.faults.exists(f, f.startsWith("80"))"#,
        r#"node.faults.filter(f, f.size() > 3).size() > 2"#,
        r#"fault.message.matches('to 0x0*[135]\\b')"#,
    ] {
        Expr::compile(ok, POLICY_VARS).unwrap_or_else(|e| panic!("`{ok}`: {e}"));
    }
    for refused in [
        r#"job.labels.exists(k, k.startsWith("team"))"#,
        r#"job.annotations.all(k, k != "")"#,
        r#"node.labels.exists_one(k, true)"#,
        // 64 faults × 64 faults × 4 KiB each compared.
        r#"node.faults.all(a, node.faults.all(b, a.contains(b)))"#,
    ] {
        assert!(
            matches!(
                Expr::compile(refused, POLICY_VARS),
                Err(CompileError::TooExpensive { .. })
            ),
            "`{refused}` accepted"
        );
    }
}

#[test]
fn fault_strings_are_cut_to_the_length_the_estimate_assumes() {
    let now = Utc.with_ymd_and_hms(2026, 11, 28, 10, 0, 0).unwrap();
    let mut f = Fault::new(FaultSource::KubeEvent, "x".repeat(10_000), now);
    // Multi-byte characters across the cut.
    f.message = Some("é".repeat(5_000));
    let node = NodeView {
        faults: vec!["9".repeat(9_000)],
        ..Default::default()
    };
    let max = cost::FAULT_STRING_MAX as i64;
    for src in [
        format!("fault.code.size() == {max}"),
        format!("fault.message.size() == {}", max / 2),
        format!("node.faults[0].size() == {max}"),
    ] {
        let e = Expr::compile(&src, POLICY_VARS).expect("compiles");
        let lazy = Scope::build(e.vars(), &f, None, None, Some(&node), now);
        assert_eq!(e.eval_bool_in(&lazy), Ok(true), "lazy: {src}");
        let eager = Vars::new(&f, None, None, Some(&node), now);
        assert_eq!(e.eval_bool(&eager), Ok(true), "eager: {src}");
    }
}

#[test]
fn explain_reports_a_refused_expression_with_its_reason() {
    let yaml = format!(
        "apiVersion: rebound.dev/v1alpha1\nkind: RecoveryPolicy\nmetadata:\n  name: costly\n  namespace: team-a\nspec:\n  when: '{}'\n",
        nested(10, 10)
    );
    let mut loaded = crate::explain::load::Loaded::default();
    crate::explain::load::load_str(std::path::Path::new("costly.yaml"), &yaml, &mut loaded)
        .expect("loads");
    let Err(err) = crate::explain::engine_from(&loaded, "rebound-system", 10) else {
        panic!("an exponential expression was accepted");
    };
    let msg = err.to_string();
    assert!(msg.contains("spec.when"), "{msg}");
    assert!(msg.contains("ExpressionTooExpensive"), "{msg}");
    assert!(msg.contains("exceeds the limit of 100000"), "{msg}");
}

#[test]
fn matches_patterns_are_checked_when_compiled() {
    // Short, but compiles to megabytes on every evaluation.
    let e = Expr::compile("fault.message.matches('((a{100}){100}){100}')", POLICY_VARS)
        .expect_err("refused");
    assert!(matches!(e, CompileError::Pattern { .. }), "{e}");
    assert_eq!(e.reason(), "ExpressionTooExpensive", "{e}");
    let e = Expr::compile("matches(fault.message, 'a(')", POLICY_VARS).expect_err("invalid");
    assert_eq!(e.reason(), "InvalidExpression", "{e}");
    // A pattern computed at run time cannot be bounded: refused.
    let e = Expr::compile("fault.message.matches('a' + '{100}')", POLICY_VARS)
        .expect_err("dynamic pattern refused");
    assert!(matches!(e, CompileError::TooExpensive { .. }), "{e}");
    // Ordinary literal patterns pass, in both call forms.
    for ok in [
        r#"fault.message.matches('to 0x0*[135]\\b')"#,
        r#"matches(fault.reason, '^Xid')"#,
    ] {
        Expr::compile(ok, POLICY_VARS).unwrap_or_else(|e| panic!("`{ok}`: {e}"));
    }
}

/// Issue 27: cel 0.15 compiled a `matches` pattern on every evaluation, so
/// `'x'.matches('(a{40}){40}')` under two nested `all` of 53 compiled it
/// 2,809 times an evaluation (about a second). rebound's `matches` compiles
/// each pattern once: evaluated twice, the pattern is compiled at most
/// once, and the answers stay CEL's.
#[test]
fn a_matches_pattern_is_compiled_once_however_often_it_is_evaluated() {
    let src =
        "[0,1,2,3,4,5,6,7,8,9].all(a, [0,1,2,3,4,5,6,7,8,9].all(b, !'x'.matches('(q{40}){41}')))";
    let e = Expr::compile(src, POLICY_VARS).expect("accepted");
    let before = super::regex_cache::compiles();
    let vars = vars(0);
    assert!(e.eval_bool(&vars).expect("evaluates"));
    assert!(e.eval_bool(&vars).expect("evaluates"));
    let compiled = super::regex_cache::compiles() - before;
    // Other tests compile their own patterns meanwhile; this one's 200
    // evaluations add at most its one compile to theirs.
    assert!(
        compiled < 50,
        "{compiled} compiles for 200 evaluations of one pattern"
    );
    // Both spellings, and a match and a miss.
    for (src, want) in [
        ("matches('abc', '^a.c$')", true),
        ("'abc'.matches('^b')", false),
        ("'Xid 79'.matches('[0-9]+$')", true),
    ] {
        let e = Expr::compile(src, POLICY_VARS).expect(src);
        assert_eq!(e.eval_bool(&vars).expect(src), want, "{src}");
    }
}
