//! Broken copies of the samples fail with the file, object and field named.

use super::*;

// --- broken copies -------------------------------------------------------------------------

/// Write `file` from samples/ with `from` replaced by `to` into a fresh temp
/// folder; return the folder.
pub(super) fn broken_copy(tag: &str, file: &str, from: &str, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(samples_dir().join(file)).expect("sample exists");
    assert!(
        text.contains(from),
        "{file} no longer contains {from:?}; update the test"
    );
    let dir = std::env::temp_dir().join(format!("rebound-samples-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let name = Path::new(file).file_name().unwrap();
    std::fs::write(dir.join(name), text.replacen(from, to, 1)).expect("write copy");
    dir
}

/// Load and compile a folder; the error text, if any.
fn load_error(dir: &Path) -> Option<String> {
    let r = load_paths(&[dir.to_path_buf()])
        .map_err(|e| e.to_string())
        .and_then(|l| {
            engine_from(&l, ROOT_NS, 100)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
    let _ = std::fs::remove_dir_all(dir);
    r.err()
}

pub(super) fn assert_names(err: &str, parts: &[&str]) {
    for p in parts {
        assert!(err.contains(p), "error does not name {p:?}: {err}");
    }
}

#[test]
fn samples_broken_copies_name_file_object_and_field() {
    // An unknown field (a typo) in a policy.
    let dir = broken_copy(
        "unknown-field",
        "policies/team-policy.yaml",
        "\n  cooldown:",
        "\n  cooldwon:",
    );
    let err = load_error(&dir).expect("an unknown field is refused");
    assert_names(
        &err,
        &[
            "team-policy.yaml",
            "RecoveryPolicy",
            "llm-training",
            "cooldwon",
        ],
    );

    // A CEL expression that does not compile.
    let dir = broken_copy(
        "bad-cel",
        "policies/team-policy.yaml",
        "when: 'job.restarts < 20",
        "when: 'job.restarts <<< 20",
    );
    let err = load_error(&dir).expect("bad CEL is refused");
    assert_names(&err, &["team-policy.yaml", "llm-training", "spec.when"]);

    // A CEL rule in a classification that uses a variable it cannot see.
    let dir = broken_copy(
        "bad-rule-cel",
        "classifications/kube-event.yaml",
        "when: 'fault.source ==",
        "when: 'job.name ==",
    );
    let err = load_error(&dir).expect("a classification rule cannot use job");
    assert_names(
        &err,
        &[
            "kube-event.yaml",
            "FaultClassification",
            "kube-event",
            "spec.rules[0].when",
        ],
    );

    // A duration that is not one, in a classification and in a policy.
    let dir = broken_copy(
        "bad-duration",
        "classifications/nvidia-xid.yaml",
        "within: 24h",
        "within: 24 hourz",
    );
    let err = load_error(&dir).expect("a bad duration is refused");
    assert_names(
        &err,
        &[
            "nvidia-xid.yaml",
            "nvidia-xid",
            "spec.escalations[0].within",
        ],
    );
    let dir = broken_copy(
        "bad-window",
        "policies/cluster-default.yaml",
        "window: 1h",
        "window: soon",
    );
    let err = load_error(&dir).expect("a bad budget window is refused");
    assert_names(
        &err,
        &[
            "cluster-default.yaml",
            "cluster-default",
            "spec.restartBudget.window",
        ],
    );
}
