//! The workspace's arrows, checked on the crate graph: the images'
//! `rebound` binary contains no simulator, and rebound-core no client or
//! runtime (README.md "Layout", each crate's README.md).

use std::collections::BTreeSet;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// The feature flags of every `cargo build` in the Dockerfile, one list per
/// build, e.g. `["--no-default-features", "--features", "nvml"]`.
fn dockerfile_builds() -> Vec<Vec<String>> {
    let d = read("Dockerfile").replace("\\\n", " ");
    d.lines()
        .filter_map(|l| l.split_once("cargo build ").map(|(_, rest)| rest))
        .map(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let mut flags = Vec::new();
            let mut i = 0;
            while i < words.len() {
                match words[i] {
                    "-p" | "--package" => {
                        flags.extend(["-p".to_string(), words[i + 1].to_string()]);
                        i += 1;
                    }
                    "--no-default-features" | "--all-features" => flags.push(words[i].into()),
                    "--features" | "-F" => {
                        flags.extend(["--features".to_string(), words[i + 1].to_string()]);
                        i += 1;
                    }
                    _ => {}
                }
                i += 1;
            }
            flags
        })
        .collect()
}

/// The packages of the normal (not dev, not build) crate graph of a
/// `cargo build` with these flags.
fn normal_crates(flags: &[String]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(root())
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}"])
        .args(flags)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_images_build_the_binary_without_the_simulator() {
    let builds = dockerfile_builds();
    assert_eq!(
        builds.len(),
        2,
        "the controller and the agent builds: {builds:?}"
    );
    for flags in &builds {
        assert!(
            flags.windows(2).any(|w| w == ["-p", "rebound-cli"]),
            "each image builds the rebound binary's package: {flags:?}"
        );
        assert!(
            flags.iter().any(|f| f == "--no-default-features"),
            "each image leaves out the default `sim` feature: {flags:?}"
        );
        let crates = normal_crates(flags);
        assert!(crates.contains("rebound"), "{flags:?}: {crates:?}");
        assert!(
            !crates.contains("rebound-sim"),
            "the image built with {flags:?} links the simulator"
        );
        assert!(
            !crates.contains("rcgen"),
            "{flags:?}: rcgen, a dependency of the simulator's test bed only, is linked"
        );
    }
    let agent = builds
        .iter()
        .find(|f| f.iter().any(|w| w == "nvml"))
        .expect("the agent image builds with nvml");
    assert!(normal_crates(agent).contains("nvml-wrapper"));
    // The check can fail: the default build (`cargo run`) has the simulator.
    assert!(normal_crates(&["-p".into(), "rebound-cli".into()]).contains("rebound-sim"));
}

#[test]
fn the_operator_never_imports_the_simulator_not_even_in_its_tests() {
    let crates = normal_crates(&["-p".into(), "rebound".into(), "-e".into(), "dev".into()]);
    assert!(crates.contains("rebound-core"), "{crates:?}");
    assert!(
        !crates.contains("rebound-sim"),
        "rebound depends on rebound-sim"
    );
    let sim = normal_crates(&["-p".into(), "rebound-sim".into()]);
    assert!(sim.contains("rebound"), "the check can fail: {sim:?}");
}

#[test]
fn the_core_crate_has_no_client_and_no_runtime() {
    let crates = normal_crates(&["-p".into(), "rebound-core".into()]);
    assert!(
        crates.contains("kube-core") && crates.contains("cel"),
        "{crates:?}"
    );
    for heavy in [
        "tokio",
        "kube-client",
        "kube-runtime",
        "hyper",
        "rebound",
        "rebound-sim",
    ] {
        assert!(!crates.contains(heavy), "rebound-core depends on {heavy}");
    }
}
