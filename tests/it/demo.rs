//! `rebound demo`, the first thing a new user runs, recovers every fault it
//! injects, and one of them in place: the same pods run again.

use std::process::Command;

#[test]
fn the_demo_recovers_every_fault_and_one_job_in_place() {
    let _watchdog = crate::watchdog::start();
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .arg("demo")
        .output()
        .expect("run rebound demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rebound demo failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("result: every fault recovered"), "{text}");
    assert!(
        text.contains("Restarted (InPlace)"),
        "the JobRestarted Event names the in-place tier:\n{text}"
    );
    assert!(
        text.contains("✓ vc-inplace: restarted in place, the same 4 pods Running and Ready again"),
        "{text}"
    );
    assert!(!text.contains('✗'), "a step of the demo failed:\n{text}");
}
