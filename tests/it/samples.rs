//! The shipped `samples/` checked through `rebound explain` (the library
//! functions behind it, and once the built binary): they load without
//! warnings, classify the faults they promise to, decide the actions they
//! promise, and broken copies fail with the file, object and field named.
//!
//! Where a test compares against the shared fault data (the XID catalog,
//! Ascend's faultCode.json) it reads that data in place; when the data is
//! absent it prints a notice and skips only that comparison.

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use rebound::explain::{engine_from, explain, load_paths, parse_fault, parse_job};
use rebound::fault::{FaultSource, Level};
use rebound::policy::{Decision, Engine, JobAction, NodeAction};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod ascend;
mod broken;
mod exits;
mod parsers;
mod sources_and_policies;
mod xid;

use broken::{assert_names, broken_copy};

const ROOT_NS: &str = "rebound-system";
const OPTED_IN_LLM: &str =
    "kind=PyTorchJob,name=llm,namespace=team-a,labels.kcover.io/cascading-recovery=true";
const XID_CATALOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/faults/xid-catalog.tsv"
);
const A3_FAULTY_JSON: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/faults/ascend/deviceinfo-cfg-a3-faulty.json"
);
const FAULT_CODE_JSON: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/faults/ascend/faultCode.json"
);

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// An engine with every shipped sample, as `rebound explain -f samples/` builds it.
fn engine() -> Engine {
    let loaded = load_paths(&[samples_dir()]).expect("samples/ loads");
    let (engine, warnings) = engine_from(&loaded, ROOT_NS, 100).expect("samples/ compiles");
    assert!(warnings.is_empty(), "warnings: {warnings:?}");
    engine
}

/// `rebound explain -f samples/ --fault F [--job J] [--repeat N]`.
fn decide(
    engine: &mut Engine,
    fault: &str,
    job: Option<&str>,
    repeat: u32,
    now: DateTime<Utc>,
) -> Decision {
    let f = parse_fault(fault, now).expect("fault parses");
    let j = job.map(|j| parse_job(j, &[], &[], now).expect("job parses"));
    explain(engine, f, j, repeat, now)
}

fn classify_once(fault: &str) -> Decision {
    decide(&mut engine(), fault, None, 1, Utc::now())
}

fn read_data(path: &str) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!(
                "NOTICE: {path} is not readable ({e}); skipping the comparison with the shared fault data"
            );
            None
        }
    }
}

/// Rows of a tab-separated file with a header line, as column → value maps.
fn tsv(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            header
                .iter()
                .zip(l.split('\t').chain(std::iter::repeat("")))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn job_restarts_whole_job(d: &Decision) -> bool {
    d.jobs.len() == 1
        && d.jobs[0].acts()
        && matches!(d.jobs[0].action, Some(JobAction::RestartJob { .. }))
}

// --- loading -------------------------------------------------------------------------------

#[test]
fn every_sample_file_loads_and_compiles_without_warnings() {
    let mut files = Vec::new();
    for sub in ["classifications", "policies"] {
        for e in std::fs::read_dir(samples_dir().join(sub)).expect("samples/ folder") {
            let p = e.expect("dir entry").path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert_eq!(files.len(), 11, "sample files: {files:?}");
    for f in &files {
        let loaded = load_paths(std::slice::from_ref(f)).unwrap_or_else(|e| panic!("{e}"));
        let objects = loaded.classifications.len() + loaded.policies.len();
        assert!(objects >= 1, "{} holds no rebound object", f.display());
        let (_, warnings) = engine_from(&loaded, ROOT_NS, 100).unwrap_or_else(|e| panic!("{e}"));
        assert!(warnings.is_empty(), "{}: {warnings:?}", f.display());
    }
    let all = load_paths(&[samples_dir()]).expect("samples/ loads");
    let sources: BTreeSet<String> = all
        .classifications
        .iter()
        .map(|(_, c)| c.spec.source.as_str().to_string())
        .collect();
    assert_eq!(
        sources,
        [
            "AscendNpu",
            "KubeEvent",
            "NodeCondition",
            "NvidiaXid",
            "PodExit"
        ]
        .map(String::from)
        .into(),
    );
    assert_eq!(all.policies.len(), 3);
    let (engine, warnings) = engine_from(&all, ROOT_NS, 100).expect("samples/ compiles");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(engine.classifier.in_use().count(), 8);
}

// --- the binary ----------------------------------------------------------------------------

#[test]
fn samples_rebound_explain_binary_prints_the_json_decision() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rebound"))
        .arg("explain")
        .arg("-f")
        .arg(samples_dir())
        .args(["--fault", "source=NvidiaXid,code=79,node=gpu-7,device=0"])
        .args(["--job", OPTED_IN_LLM])
        .args(["-o", "json"])
        .output()
        .expect("run rebound");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rebound explain failed: {stderr}");
    assert!(stderr.trim().is_empty(), "warnings: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON on stdout ({e}): {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(v["level"], "Separate");
    assert_eq!(v["rule"], "nvidia-xid/node-reboot-required");
    let node_actions: Vec<&str> = v["node"]["actions"]
        .as_array()
        .expect("node actions")
        .iter()
        .filter_map(|a| a["action"].as_str())
        .collect();
    assert_eq!(node_actions, ["Cordon", "Taint"]);
    assert_eq!(v["jobs"][0]["action"]["action"], "RestartJob");
    assert!(v["jobs"][0]["skip"].is_null());

    // A broken copy makes it exit non-zero, naming the file.
    let dir = broken_copy(
        "binary",
        "policies/team-policy.yaml",
        "\n  cooldown:",
        "\n  cooldwon:",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rebound"))
        .arg("explain")
        .arg("-f")
        .arg(&dir)
        .args(["--fault", "source=NvidiaXid,code=79,node=gpu-7"])
        .output()
        .expect("run rebound");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    assert_names(
        &String::from_utf8_lossy(&out.stderr),
        &["team-policy.yaml", "llm-training", "cooldwon"],
    );
}
