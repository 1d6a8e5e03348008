//! The findings of issue 31, each through `rebound explain` as a user
//! would see it (the core's own tests are in rebound-core's
//! policy/tests/cel_scope.rs).

use super::explain::{CLASSIFICATIONS, JOB, assert_outcome, cooldown, gate};

/// XID 79 (Separate) on gpu-7: the policy's `node` is gpu-7 at Separate,
/// not an empty healthy node.
#[test]
fn explain_gives_policies_the_faults_node() {
    let xid79 = |p: &str| {
        format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=79,node=gpu-7 --job {JOB}")
    };
    assert_outcome(&xid79(&gate(r#"node.name == "gpu-7""#)), "acts");
    assert_outcome(&xid79(&gate(r#"node.level == "Ignore""#)), "GateFalse");
    assert_outcome(&xid79(&gate(r#"node.level == "Separate""#)), "acts");
    assert_outcome(
        &format!(
            "{} --node labels.zone=a",
            xid79(&gate(r#"node.labels["zone"] == "a""#))
        ),
        "acts",
    );
    // The documented gate holds the job back on the faulty node.
    let held = gate(
        r#"!(node.level in ["ResetDevice", "Separate"] && now - job.lastRestart < duration("10m"))"#,
    );
    assert_outcome(
        &format!("{} --hw-restarts-ago 5m", xid79(&held)),
        "GateFalse",
    );
}

/// A `when` that reads no variable is evaluated: `false` holds.
#[test]
fn explain_evaluates_a_constant_when() {
    for when in ["false", "1 == 2"] {
        assert_outcome(
            &format!(
                "{CLASSIFICATIONS} -f {} --fault source=NvidiaXid,code=13 --job {JOB}",
                gate(when)
            ),
            "GateFalse",
        );
    }
}

/// Constant cooldowns hold before and after a restart, never
/// `CooldownError`.
#[test]
fn explain_applies_constant_cooldowns_after_a_restart() {
    for c in ["600", r#""10m""#, r#"duration("10m")"#] {
        let p = cooldown(c);
        let f = |ago: &str| {
            format!("{CLASSIFICATIONS} -f {p} --fault source=NvidiaXid,code=13 --job {JOB}{ago}")
        };
        assert_outcome(&f(""), "acts");
        assert_outcome(&f(" --restarts-ago 1m"), "Cooldown");
        assert_outcome(&f(" --restarts-ago 11m"), "acts");
    }
}
