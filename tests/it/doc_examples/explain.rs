//! `rebound explain` as the examples use it: its own argument parser and
//! code, files written for one example, and the outcome in a word.

use clap::Parser;
use rebound::explain::{ExplainArgs, run};
use rebound::policy::Decision;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `rebound explain`'s arguments, as the binary parses them.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ExplainArgs,
}

/// Parse `argv` (what follows `rebound explain`, quoted as in a shell).
pub fn args(argv: &str) -> ExplainArgs {
    let words = shlex::split(argv).unwrap_or_else(|| panic!("unbalanced quotes: {argv}"));
    Cli::try_parse_from(std::iter::once("explain".to_string()).chain(words))
        .unwrap_or_else(|e| panic!("`rebound explain {argv}` does not parse: {e}"))
        .args
}

/// Decide as `rebound explain ARGV` does.
pub fn decide(argv: &str) -> Decision {
    run(&args(argv), chrono::Utc::now())
        .unwrap_or_else(|e| panic!("`rebound explain {argv}` failed: {e}"))
        .decision
}

/// The error `rebound explain ARGV` stops with.
pub fn error(argv: &str) -> String {
    match run(&args(argv), chrono::Utc::now()) {
        Ok(d) => panic!("`rebound explain {argv}` decided {:?}", d.decision.jobs),
        Err(e) => e.to_string(),
    }
}

/// What became of the first job: `acts`, or the skip reason.
pub fn outcome(d: &Decision) -> String {
    let j = d.jobs.first().expect("a job was decided");
    match &j.skip {
        None if j.acts() => "acts".into(),
        None => "nothing".into(),
        Some(s) => s.name().into(),
    }
}

/// The outcome of `rebound explain ARGV`, with the reasons on failure.
pub fn assert_outcome(argv: &str, want: &str) {
    let d = decide(argv);
    assert_eq!(
        outcome(&d),
        want,
        "`rebound explain {argv}`: {:?}",
        d.jobs.first().map(|j| &j.reasons)
    );
}

/// A file of its own for one example; its path.
pub fn write(name: &str, doc: &Value) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rebound-doc-examples-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let p = dir.join(format!("{name}.yaml"));
    // JSON is YAML: no quoting of the expression to get wrong.
    std::fs::write(&p, doc.to_string()).expect("write");
    p.to_string_lossy().into_owned()
}

/// A RecoveryPolicy `example` in `ns` covering every job there, with
/// `spec` added.
pub fn policy(ns: &str, spec: Value) -> String {
    let mut s = json!({"selector": {}});
    if let (Some(o), Some(add)) = (s.as_object_mut(), spec.as_object()) {
        o.extend(add.clone());
    }
    write(
        "policy",
        &json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "RecoveryPolicy",
            "metadata": {"name": "example", "namespace": ns}, "spec": s}),
    )
}

/// A policy in team-a whose `when` is `expr` (cooldown 0s).
pub fn gate(expr: &str) -> String {
    policy("team-a", json!({"when": expr, "cooldown": "0s"}))
}

/// A policy in team-a whose `cooldown` is `expr`.
pub fn cooldown(expr: &str) -> String {
    policy("team-a", json!({"cooldown": expr}))
}

/// A PyTorchJob in team-a.
pub const JOB: &str = "kind=PyTorchJob,name=llm,namespace=team-a";
/// The shipped classifications.
pub const CLASSIFICATIONS: &str = "-f samples/classifications/";
