//! docs/cel.md's examples, each run through `rebound explain` with a
//! fault and a job for which its text says what happens.

use super::explain::{
    CLASSIFICATIONS, JOB, assert_outcome, cooldown, decide, error, gate, policy, write,
};
use serde_json::json;

/// "Longer cooldowns for jobs that keep failing": 30s, then 2m from the
/// third restart, 10m from the tenth.
pub fn growing_cooldown(ex: &str) {
    let p = cooldown(ex);
    let run = |ago: &str, want: &str| {
        assert_outcome(
            &format!(
                "{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB} --restarts-ago {ago}"
            ),
            want,
        )
    };
    run("1m,2h", "acts");
    run("20s,2h", "Cooldown");
    run("1m,2h,3h", "Cooldown");
    run("3m,2h,3h", "acts");
    let ten = "9m,2h,3h,4h,5h,6h,7h,8h,9h,10h";
    run(ten, "Cooldown");
    run(&ten.replacen("9m", "11m", 1), "acts");
}

/// "Stop after 20 restarts and let an owner pause recovery with an
/// annotation".
pub fn restarts_and_pause_gate(ex: &str) {
    let p = gate(ex);
    let ago = |n: usize| {
        (1..=n)
            .map(|h| format!("{h}h"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let fault = format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13");
    assert_outcome(
        &format!("{fault} --job {JOB} --restarts-ago {}", ago(19)),
        "acts",
    );
    assert_outcome(
        &format!("{fault} --job {JOB} --restarts-ago {}", ago(20)),
        "GateFalse",
    );
    assert_outcome(
        &format!("{fault} --job {JOB},annotations.rebound.dev/pause=true"),
        "GateFalse",
    );
    assert_outcome(
        &format!("{fault} --job {JOB},annotations.rebound.dev/pause=false"),
        "acts",
    );
}

/// "Restart only for some XIDs": the listed ones, and any other source.
pub fn some_xids(ex: &str) {
    let p = gate(ex);
    let f = |fault: &str| format!("{CLASSIFICATIONS} -f {p} --fault {fault} --job {JOB}");
    assert_outcome(&f("source=NvidiaXid,code=79,node=gpu-7"), "acts");
    assert_outcome(&f("source=NvidiaXid,code=13,node=gpu-7"), "acts");
    // XID 48 (a double-bit ECC error) restarts jobs, but not under this gate.
    assert_outcome(&f("source=NvidiaXid,code=48,node=gpu-7"), "GateFalse");
    assert_outcome(&f("source=PodExit,exitCode=1,pod=llm-worker-0"), "acts");
}

/// "A team policy reacts to its own exits only": its jobs are restarted
/// for non-zero exits other than OOMKilled, not for hardware faults.
pub fn own_exits_only(ex: &str) {
    let p = gate(ex);
    let f = |fault: &str| format!("{CLASSIFICATIONS} -f {p} --fault {fault} --job {JOB}");
    assert_outcome(
        &f("source=PodExit,exitCode=1,reason=Error,pod=llm-worker-0"),
        "acts",
    );
    assert_outcome(
        &f("source=PodExit,exitCode=137,reason=OOMKilled,pod=llm-worker-0"),
        "GateFalse",
    );
    assert_outcome(&f("source=NvidiaXid,code=79,node=gpu-7"), "GateFalse");
    // The node is still separated: node actions are not the team's.
    let d = super::explain::decide(&format!(
        "{CLASSIFICATIONS} -f samples/policies/cluster-default.yaml -f {p} --fault source=NvidiaXid,code=79,node=gpu-7 --job {JOB}"
    ));
    assert!(d.node.as_ref().is_some_and(|n| n.acts()), "{:?}", d.node);
}

/// "No automatic restarts at the weekend (Sunday is 0, Saturday 6)".
pub fn weekdays(ex: &str) {
    let p = gate(ex);
    let at = |now: &str| {
        format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB} --now {now}")
    };
    assert_outcome(&at("2026-11-29T12:00:00Z"), "GateFalse"); // a Sunday
    assert_outcome(&at("2026-11-28T12:00:00Z"), "GateFalse"); // a Saturday
    assert_outcome(&at("2026-11-30T12:00:00Z"), "acts"); // a Monday
    assert_outcome(&at("2026-12-04T23:59:59Z"), "acts"); // a Friday, in UTC
}

/// "Skip inference namespaces" (a cluster default, for every namespace).
pub fn not_inference(ex: &str) {
    let p = policy("rebound-system", json!({"when": ex}));
    let f = |ns: &str| {
        format!(
            "{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job kind=PyTorchJob,name=llm,namespace={ns}"
        )
    };
    assert_outcome(&f("inference-eu"), "GateFalse");
    assert_outcome(&f("team-a"), "acts");
    assert_outcome(&f("my-inference-x"), "acts");
}

/// "Do not restart a job again within ten minutes of its last restart
/// while its node is faulty": `node` is the fault's node at its level.
pub fn faulty_node_gate(ex: &str) {
    let p = gate(ex);
    let f = |fault: &str, ago: &str| {
        format!("{CLASSIFICATIONS} -f {p} --fault {fault} --job {JOB} --hw-restarts-ago {ago}")
    };
    // XID 79 takes gpu-7 to Separate: held within ten minutes.
    assert_outcome(&f("source=NvidiaXid,code=79,node=gpu-7", "5m"), "GateFalse");
    assert_outcome(&f("source=NvidiaXid,code=79,node=gpu-7", "15m"), "acts");
    // XID 13 on a healthy node: the node is not faulty.
    assert_outcome(&f("source=NvidiaXid,code=13,node=gpu-7", "5m"), "acts");
    // ... unless it carries a fault at such a level already.
    assert_outcome(
        &format!(
            "{} --node level=ResetDevice,faults=48",
            f("source=NvidiaXid,code=13,node=gpu-7", "5m")
        ),
        "GateFalse",
    );
}

/// "Escalate an NVLink XID that repeats (a classification rule's `when`)":
/// the third XID 74 on a GPU is Separate.
pub fn nvlink_escalation(ex: &str) {
    let fc = write(
        "classification",
        &json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
            "metadata": {"name": "nvlink"},
            "spec": {"source": "NvidiaXid", "priority": 300,
                "rules": [{"name": "nvlink-flapping", "when": ex, "level": "Separate"}]}}),
    );
    let f = |n: u32| {
        decide(&format!(
            "{CLASSIFICATIONS} -f {fc} --fault source=NvidiaXid,code=74,node=gpu-7,device=1 --repeat {n}"
        ))
    };
    let third = f(3);
    assert_eq!(third.rule, "nvlink/nvlink-flapping");
    assert_eq!(third.level.to_string(), "Separate");
    let second = f(2);
    assert_ne!(second.rule, "nvlink/nvlink-flapping", "two are not enough");
}

/// concepts.md's duration of a fault (`now - fault.firstSeen`), which an
/// escalation measures per trust domain: a rule on it holds once the fault
/// has lasted, and not before.
pub fn fault_age(ex: &str) {
    let fc = write(
        "classification",
        &json!({"apiVersion": "rebound.dev/v1alpha1", "kind": "FaultClassification",
            "metadata": {"name": "age"},
            "spec": {"source": "NvidiaXid", "priority": 300,
                "rules": [{"name": "old", "when": format!("({ex}) > duration(\"5m\")"), "level": "Separate"}]}}),
    );
    let at = |now: &str| {
        decide(&format!(
            "{CLASSIFICATIONS} -f {fc} --fault source=NvidiaXid,code=13,node=gpu-7,firstSeen=2026-12-01T00:00:00Z --now {now}"
        ))
    };
    assert_eq!(at("2026-12-01T00:10:00Z").rule, "age/old");
    assert_ne!(at("2026-12-01T00:01:00Z").rule, "age/old");
}

/// "Large jobs get a longer cooldown (restarting 512 pods is expensive)".
pub fn large_jobs_cooldown(ex: &str) {
    let p = cooldown(ex);
    let f = |replicas: u32, ago: &str| {
        format!(
            "{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB},replicas={replicas} --restarts-ago {ago}"
        )
    };
    assert_outcome(&f(512, "2m"), "Cooldown");
    assert_outcome(&f(64, "2m"), "Cooldown");
    assert_outcome(&f(63, "2m"), "acts");
    assert_outcome(&f(512, "6m"), "acts");
}

/// The guarded label lookup: no error when the label is missing.
pub fn guarded_lookup(ex: &str) {
    let p = gate(ex);
    let f = |labels: &str| {
        format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB}{labels}")
    };
    assert_outcome(&f(",labels.team=llm"), "acts");
    assert_outcome(&f(",labels.team=web"), "GateFalse");
    assert_outcome(&f(""), "GateFalse");
}

/// The gate `ex` over XIDs on gpu-7: each code's outcome.
fn xid_gate(ex: &str, want: &[(&str, &str)]) {
    let p = gate(ex);
    for (code, outcome) in want {
        assert_outcome(
            &format!(
                "{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code={code},node=gpu-7 --job {JOB}"
            ),
            outcome,
        );
    }
}

/// `fault.code == "79"`: codes are strings.
pub fn code_is_a_string(ex: &str) {
    xid_gate(ex, &[("79", "acts"), ("13", "GateFalse")]);
}

/// `int(fault.code) >= 140`: ranges of decimal codes.
pub fn decimal_range(ex: &str) {
    xid_gate(ex, &[("145", "acts"), ("140", "acts"), ("13", "GateFalse")]);
}

/// `job.restarts + 1` and `fault.exitCode == 137`: integers are `int`.
pub fn ints_without_suffixes(ex: &str) {
    let expr = if ex.contains("restarts") {
        format!("{ex} == 3")
    } else {
        ex.to_string()
    };
    let p = gate(&expr);
    let d = decide(&format!(
        "{CLASSIFICATIONS} -f {p} --fault source=PodExit,exitCode=137,pod=llm-worker-0 --job {JOB} --restarts-ago 1h,2h"
    ));
    assert_eq!(
        super::explain::outcome(&d),
        "acts",
        "{ex}: {:?}",
        d.jobs[0].reasons
    );
}

/// `duration("1h30m")`, `duration("5m")`: constant cooldowns, before and
/// after a restart.
pub fn constant_duration(ex: &str) {
    let p = cooldown(ex);
    let secs = if ex.contains("1h30m") { 5400 } else { 300 };
    let f = |ago: String| {
        format!(
            "{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB} --restarts-ago {ago}"
        )
    };
    assert_outcome(
        &format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB}"),
        "acts",
    );
    assert_outcome(&f(format!("{}s", secs - 60)), "Cooldown");
    assert_outcome(&f(format!("{}s", secs + 60)), "acts");
}

/// `timestamp("2026-11-30T10:00:00Z")`: timestamps compare with `now`.
pub fn timestamp_literal(ex: &str) {
    let p = gate(&format!("now > {ex}"));
    let at = |now: &str| {
        format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB} --now {now}")
    };
    assert_outcome(&at("2026-11-30T10:00:01Z"), "acts");
    assert_outcome(&at("2026-11-30T09:59:59Z"), "GateFalse");
}

/// `job.restartz`: a field `job` does not have makes the policy invalid.
pub fn unknown_field(ex: &str) {
    let p = gate(&format!("{ex} < 3"));
    let e = error(&format!(
        "{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB}"
    ));
    assert!(
        e.contains("has no field `restartz`") && e.contains("InvalidExpression"),
        "{e}"
    );
}

/// The `node` examples: XID 79 on gpu-7 gives `node.name == "gpu-7"`,
/// `node.level == "Separate"` and `"79" in node.faults`.
pub fn node_of_the_fault(ex: &str) {
    let p = gate(ex);
    let f = |fault: &str, node: &str| {
        format!("{CLASSIFICATIONS} -f {p} --fault {fault} --job {JOB}{node}")
    };
    assert_outcome(&f("source=NvidiaXid,code=79,node=gpu-7", ""), "acts");
    // A software fault on another node: none of the three holds.
    assert_outcome(&f("source=NvidiaXid,code=13,node=gpu-8", ""), "GateFalse");
    // A tenant's exit on gpu-7 leaves the node as it was (healthy): only
    // its name is the same.
    let want = if ex.contains("node.name") {
        "acts"
    } else {
        "GateFalse"
    };
    assert_outcome(
        &f("source=PodExit,exitCode=1,node=gpu-7,pod=llm-worker-0", ""),
        want,
    );
    // The node's state before the fault counts too.
    assert_outcome(
        &f(
            "source=PodExit,exitCode=1,node=gpu-7,pod=llm-worker-0",
            " --node level=Separate,faults=79",
        ),
        "acts",
    );
}

/// A quoted constant (`'1 == 2'`, `'duration("5m")'`), as a YAML field
/// holds it: evaluated as written.
pub fn quoted_constant(ex: &str) {
    let inner = &ex[1..ex.len() - 1];
    if inner.starts_with("duration(") {
        return constant_duration(inner);
    }
    assert_outcome(
        &format!(
            "{CLASSIFICATIONS} -f {} --fault source=NvidiaXid,code=13 --job {JOB}",
            gate(inner)
        ),
        "GateFalse",
    );
    // The positive control: a true constant restarts.
    assert_outcome(
        &format!(
            "{CLASSIFICATIONS} -f {} --fault source=NvidiaXid,code=13 --job {JOB}",
            gate("1 == 1")
        ),
        "acts",
    );
}
