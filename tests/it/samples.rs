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

// --- NVIDIA XID ----------------------------------------------------------------------------

#[test]
fn samples_xid_79_separates_the_node_and_restarts_the_job() {
    let mut e = engine();
    let d = decide(
        &mut e,
        "source=NvidiaXid,code=79,node=gpu-7,device=0",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::Separate, "rule {}", d.rule);
    let node = d.node.as_ref().expect("a node decision");
    assert!(node.acts(), "{:?}", node.reasons);
    assert!(node.actions.contains(&NodeAction::Cordon));
    assert!(
        node.actions
            .iter()
            .any(|a| matches!(a, NodeAction::Taint { .. }))
    );
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    assert_eq!(d.jobs[0].policy.as_deref(), Some("team-a/llm-training"));
}

#[test]
fn samples_xid_13_escalates_only_when_it_repeats_on_one_gpu() {
    let fault = "source=NvidiaXid,code=13,node=gpu-3,device=2";
    // Once: the application's problem.
    let once = classify_once(fault);
    assert_eq!(once.level, Level::RestartJob);
    assert_eq!(once.escalated_by, None);
    // Twice on the same GPU (one minute apart): the GPU is suspect.
    let mut e = engine();
    let twice = decide(&mut e, fault, Some(OPTED_IN_LLM), 2, Utc::now());
    assert_eq!(twice.level, Level::ResetDevice);
    assert!(
        twice
            .escalated_by
            .as_deref()
            .is_some_and(|x| x.contains("app-error-repeats-on-one-gpu")),
        "{:?}",
        twice.escalated_by
    );
    assert!(
        twice
            .node
            .as_ref()
            .is_some_and(|n| n.actions.contains(&NodeAction::Cordon))
    );
    assert!(job_restarts_whole_job(&twice), "{:?}", twice.jobs);
    // Twice on the same node but two different GPUs: not escalated.
    let mut e = engine();
    let t0 = Utc::now();
    let mut on_gpu = |device: &str, at: DateTime<Utc>| {
        let f = parse_fault(
            &format!("source=NvidiaXid,code=13,node=gpu-3,device={device}"),
            at,
        )
        .unwrap();
        e.classifier.classify(f, None, at)
    };
    let first = on_gpu("0", t0);
    let second = on_gpu("1", t0 + Duration::minutes(1));
    assert_eq!(first.level, Level::RestartJob);
    assert_eq!(
        second.level,
        Level::RestartJob,
        "escalated by {:?}",
        second.escalated_by
    );
    assert_eq!(second.escalated_by, None);
    assert_eq!(second.fault.count, 1);
    // And the same GPU again later that day does escalate.
    let third = on_gpu("0", t0 + Duration::hours(3));
    assert_eq!(third.level, Level::ResetDevice);
}

#[test]
fn samples_xid_31_twice_in_a_day_resets_but_not_a_day_apart() {
    let mut e = engine();
    let t0 = Utc::now();
    let mut at = |when: DateTime<Utc>| {
        let f = parse_fault("source=NvidiaXid,code=31,node=gpu-1,device=5", when).unwrap();
        e.classifier.classify(f, None, when).level
    };
    assert_eq!(at(t0), Level::RestartJob);
    assert_eq!(
        at(t0 + Duration::hours(25)),
        Level::RestartJob,
        "outside the 24h window"
    );
    assert_eq!(at(t0 + Duration::hours(26)), Level::ResetDevice);
}

#[test]
fn samples_xid_48_resets_the_gpu() {
    let d = decide(
        &mut engine(),
        "source=NvidiaXid,code=48,node=gpu-2,device=1",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::ResetDevice, "rule {}", d.rule);
    assert!(
        d.node
            .as_ref()
            .is_some_and(|n| n.actions == vec![NodeAction::Cordon])
    );
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
}

#[test]
fn samples_xid_43_and_45_are_not_restarts_until_they_storm() {
    for code in ["43", "45"] {
        let fault = format!("source=NvidiaXid,code={code},node=gpu-4,device=0");
        let d = decide(&mut engine(), &fault, Some(OPTED_IN_LLM), 1, Utc::now());
        assert_eq!(d.level, Level::Ignore);
        assert!(!d.jobs[0].acts());
        let storm = decide(&mut engine(), &fault, None, 10, Utc::now());
        assert_eq!(
            storm.level,
            Level::PreSeparate,
            "{code} x10 within 10 minutes"
        );
    }
}

#[test]
fn samples_xid_154_and_nvlink5_read_the_kernel_line() {
    let level = |fault: &str| classify_once(fault).level;
    let x154 = "source=NvidiaXid,code=154,node=n,device=0,message=GPU recovery action changed from";
    assert_eq!(
        level(&format!("{x154} 0x0 (None) to 0x1 (GPU Reset Required)")),
        Level::ResetDevice
    );
    assert_eq!(
        level(&format!("{x154} 0x0 (None) to 0x2 (Node Reboot Required)")),
        Level::Separate
    );
    assert_eq!(
        level(&format!("{x154} 0x0 (None) to 0x4 (Drain and Reset)")),
        Level::PreSeparate
    );
    assert_eq!(
        level(&format!("{x154} 0x1 (GPU Reset Required) to 0x0 (None)")),
        Level::Ignore
    );
    let nvl = "source=NvidiaXid,node=n,device=0";
    assert_eq!(
        level(&format!(
            "{nvl},code=149,message=NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000)"
        )),
        Level::ResetDevice
    );
    assert_eq!(
        level(&format!(
            "{nvl},code=145,message=RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 0x00000008)"
        )),
        Level::Ignore
    );
    assert_eq!(
        level(&format!("{nvl},code=146")),
        Level::ResetDevice,
        "no message: the safe side"
    );
}

/// Every XID of NVIDIA's catalog has a rule of its own (never the default
/// level), and the level agrees with NVIDIA's immediate resolution bucket.
#[test]
fn samples_every_catalog_xid_has_a_rule_matching_nvidias_action() {
    let Some(text) = read_data(XID_CATALOG) else {
        return;
    };
    let rows = tsv(&text);
    assert!(rows.len() >= 172, "catalog rows: {}", rows.len());
    let mut e = engine();
    let now = Utc::now();
    let mut problems = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let xid = &row["xid"];
        // A node per XID so that no escalation history is shared.
        let f = parse_fault(
            &format!("source=NvidiaXid,code={xid},node=n{i},device=0"),
            now,
        )
        .unwrap();
        let c = e.classifier.classify(f, None, now);
        if !c.rule.starts_with("nvidia-xid/") || c.rule.ends_with("/defaultLevel") {
            problems.push(format!("XID {xid}: no rule (got {})", c.rule));
            continue;
        }
        let bucket = row["nvidia_immediate_resolution"].as_str();
        let allowed: &[Level] = match bucket {
            "RESTART_APP" | "CHECK_UVM" => &[Level::RestartJob],
            "RESET_GPU" => &[Level::ResetDevice, Level::Separate],
            "WORKFLOW_XID_48" | "WORKFLOW_NVLINK_ERR" | "WORKFLOW_NVLINK5_ERR" => {
                &[Level::ResetDevice]
            }
            "RESTART_BM" | "RESTART_VM" => &[Level::Separate],
            "IGNORE" | "WORKFLOW_XID_45" | "XID_154" => &[Level::Ignore],
            "CONTACT_SUPPORT" | "CHECK_MECHANICALS" | "UPDATE_SWFW" => &[Level::PreSeparate],
            _ => &Level::ALL,
        };
        if !allowed.contains(&c.level) {
            problems.push(format!(
                "XID {xid} ({bucket}): {} by {}, expected one of {allowed:?}",
                c.level, c.rule
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// --- Ascend --------------------------------------------------------------------------------

/// The device plugin's lookup order (first list wins for a code listed twice).
const ASCEND_ORDER: [&str; 8] = [
    "SeparateNPUCodes",
    "PreSeparateNPUCodes",
    "RestartNPUCodes",
    "FreeRestartNPUCodes",
    "RestartBusinessCodes",
    "RestartRequestCodes",
    "NotHandleFaultCodes",
    "SubHealthFaultCodes",
];

fn ascend_expected(list: &str) -> Level {
    // SubHealth has no rebound level: the sample maps it to PreSeparate.
    Level::from_clusterd(list).unwrap_or(Level::PreSeparate)
}

#[test]
fn samples_ascend_80e18402_gets_its_faultcode_json_level() {
    let d = decide(
        &mut engine(),
        "source=AscendNpu,code=80e18402,node=npu-1,device=4",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert!(d.rule.starts_with("ascend-npu/"), "rule {}", d.rule);
    let Some(text) = read_data(FAULT_CODE_JSON) else {
        return;
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("faultCode.json is JSON");
    let list = ASCEND_ORDER
        .iter()
        .find(|l| {
            json[**l].as_array().is_some_and(|a| {
                a.iter().any(|c| {
                    c.as_str()
                        .is_some_and(|c| c.eq_ignore_ascii_case("80E18402"))
                })
            })
        })
        .expect("80E18402 is in faultCode.json");
    assert_eq!(d.level, ascend_expected(list), "80E18402 is in {list}");
    if d.level.restarts_jobs() {
        assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    }
}

#[test]
fn samples_every_ascend_code_gets_its_faultcode_json_level() {
    let Some(text) = read_data(FAULT_CODE_JSON) else {
        return;
    };
    let json: serde_json::Value = serde_json::from_str(&text).expect("faultCode.json is JSON");
    let mut expected: BTreeMap<String, (Level, &str)> = BTreeMap::new();
    for list in ASCEND_ORDER {
        for c in json[list].as_array().into_iter().flatten() {
            let code = c.as_str().expect("codes are strings").to_ascii_uppercase();
            expected
                .entry(code)
                .or_insert((ascend_expected(list), list));
        }
    }
    assert!(expected.len() >= 800, "codes: {}", expected.len());
    let mut e = engine();
    let now = Utc::now();
    let mut problems = Vec::new();
    for (i, (code, (level, list))) in expected.iter().enumerate() {
        let f = parse_fault(
            &format!("source=AscendNpu,code={code},node=npu-{i},device=0"),
            now,
        )
        .unwrap();
        let c = e.classifier.classify(f, None, now);
        if c.level != *level || c.rule.ends_with("/defaultLevel") {
            problems.push(format!("{code} ({list}): {} by {}", c.level, c.rule));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn samples_ascend_81078603_escalates_when_it_lasts_or_repeats() {
    // NotHandleFault at first; lasting over 20 s -> PreSeparate; 5 times a day -> Separate.
    assert_eq!(
        classify_once("source=AscendNpu,code=81078603,node=npu-1,device=0").level,
        Level::Ignore
    );
    let lasting = decide(
        &mut engine(),
        "source=AscendNpu,code=81078603,node=npu-1,device=0",
        None,
        2,
        Utc::now(),
    );
    assert_eq!(
        lasting.level,
        Level::PreSeparate,
        "seen one minute apart: lasted over 20 s"
    );
    let repeated = decide(
        &mut engine(),
        "source=AscendNpu,code=81078603,node=npu-1,device=0",
        None,
        5,
        Utc::now(),
    );
    assert_eq!(repeated.level, Level::Separate);
}

// --- container exits -----------------------------------------------------------------------

#[test]
fn samples_oom_killed_restarts_the_job() {
    // An opted-in job in a namespace without its own policy: the cluster default.
    let job = "kind=PyTorchJob,name=llm,namespace=team-c,labels.kcover.io/cascading-recovery=true";
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=137,reason=OOMKilled,node=gpu-3,pod=llm-worker-1,namespace=team-c",
        Some(job),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::RestartJob);
    assert_eq!(
        d.rule, "pod-exit/oom-killed",
        "the reason wins over exit 137"
    );
    assert!(
        d.node.as_ref().is_some_and(|n| n.actions.is_empty()),
        "an OOM never touches the node"
    );
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    assert_eq!(
        d.jobs[0].policy.as_deref(),
        Some("rebound-system/cluster-default")
    );
    // In team-a the team policy restarts the failed pod first.
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=137,reason=OOMKilled,node=gpu-3,pod=llm-worker-1,namespace=team-a",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert!(d.jobs[0].acts());
    assert!(
        matches!(&d.jobs[0].action, Some(JobAction::RestartPod { pod, .. }) if pod == "llm-worker-1")
    );
}

#[test]
fn samples_exit_code_1_restarts_the_job() {
    let job = "kind=MPIJob,name=bert,namespace=team-c,labels.kcover.io/cascading-recovery=true";
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=1,reason=Error,node=gpu-9,pod=bert-worker-0,namespace=team-c",
        Some(job),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::RestartJob, "rule {}", d.rule);
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
}

#[test]
fn samples_sigterm_is_a_deliberate_stop() {
    let job = "kind=PyTorchJob,name=llm,namespace=team-c,labels.kcover.io/cascading-recovery=true";
    let d = decide(
        &mut engine(),
        "source=PodExit,exitCode=143,reason=Error,node=gpu-9,pod=llm-worker-0,namespace=team-c",
        Some(job),
        1,
        Utc::now(),
    );
    assert_eq!(d.level, Level::Ignore);
    assert!(!d.jobs[0].acts());
}

#[test]
fn samples_pod_exits_never_touch_nodes() {
    // A tenant writes its own exit codes and messages: no PodExit rule may cordon.
    let loaded = load_paths(&[samples_dir()]).unwrap();
    for (_, c) in &loaded.classifications {
        if c.spec.source == FaultSource::PodExit || c.spec.source == FaultSource::KubeEvent {
            for r in &c.spec.rules {
                assert!(
                    r.level <= Level::RestartJob,
                    "{} rule {} is {}",
                    c.spec.source,
                    r.name,
                    r.level
                );
            }
            assert!(
                c.spec
                    .escalations
                    .iter()
                    .all(|e| e.level <= Level::RestartJob)
            );
            assert!(c.spec.default_level.is_none_or(|l| l <= Level::RestartJob));
        }
    }
}

// --- other sources and policies ------------------------------------------------------------

#[test]
fn samples_node_conditions_and_kcover_events() {
    assert_eq!(
        classify_once("source=NodeCondition,code=KernelDeadlock,reason=DockerHung,node=n").level,
        Level::Separate
    );
    assert_eq!(
        classify_once("source=NodeCondition,code=FrequentKubeletRestart,node=n").level,
        Level::PreSeparate
    );
    assert_eq!(
        classify_once("source=NodeCondition,code=SomeVendorCondition,node=n").level,
        Level::Ignore
    );
    assert_eq!(
        classify_once("source=NodeCondition,code=NotReady,node=n").level,
        Level::Ignore
    );
    let long = decide(
        &mut engine(),
        "source=NodeCondition,code=NotReady,node=n",
        None,
        3,
        Utc::now(),
    );
    assert_eq!(long.level, Level::ResetDevice, "NotReady for 2 minutes");
    let d = decide(
        &mut engine(),
        "source=KubeEvent,code=NeedRecovery,namespace=team-a",
        Some(OPTED_IN_LLM),
        1,
        Utc::now(),
    );
    assert_eq!(d.rule, "kube-event/kcover-need-recovery");
    assert!(d.jobs[0].acts(), "{:?}", d.jobs);
}

#[test]
fn samples_policies_cooldown_budget_and_dry_run() {
    let now = Utc::now();
    let mut e = engine();
    let job = |ns: &str, ago: &[&str]| {
        let ago: Vec<String> = ago.iter().map(|s| s.to_string()).collect();
        parse_job(
            &format!("kind=Job,name=j,namespace={ns},labels.kcover.io/cascading-recovery=true"),
            &ago,
            &[],
            now,
        )
        .unwrap()
    };
    let exit1 = |ns: &str| {
        parse_fault(
            &format!("source=PodExit,exitCode=1,node=n,pod=p,namespace={ns}"),
            now,
        )
        .unwrap()
    };
    // Cluster default: the cooldown grows with restarts (4 restarts: 2 minutes).
    let d = explain(
        &mut e,
        exit1("team-c"),
        Some(job("team-c", &["90s", "1h", "2h", "3h"])),
        1,
        now,
    );
    assert_eq!(
        d.jobs[0].skip.as_ref().map(|s| s.name()),
        Some("Cooldown"),
        "{:?}",
        d.jobs[0].reasons
    );
    let d = explain(
        &mut e,
        exit1("team-c"),
        Some(job("team-c", &["3m", "1h", "2h", "3h"])),
        1,
        now,
    );
    assert!(d.jobs[0].acts(), "{:?}", d.jobs[0].reasons);
    // ... and stops after 5 self-inflicted restarts within an hour.
    let d = explain(
        &mut e,
        exit1("team-c"),
        Some(job("team-c", &["11m", "20m", "30m", "40m", "50m"])),
        1,
        now,
    );
    assert_eq!(
        d.jobs[0].skip.as_ref().map(|s| s.name()),
        Some("BudgetExhausted"),
        "{:?}",
        d.jobs[0].reasons
    );
    // team-b tries rebound in dry run: decided, not done.
    let d = explain(&mut e, exit1("team-b"), Some(job("team-b", &[])), 1, now);
    assert_eq!(d.jobs[0].policy.as_deref(), Some("team-b/try-rebound"));
    assert_eq!(d.jobs[0].skip.as_ref().map(|s| s.name()), Some("DryRun"));
    // Not opted in: no policy restarts it.
    let not_opted = parse_job("kind=Job,name=j,namespace=team-c", &[], &[], now).unwrap();
    let d = explain(&mut e, exit1("team-c"), Some(not_opted), 1, now);
    assert_eq!(d.jobs[0].skip.as_ref().map(|s| s.name()), Some("NoPolicy"));
    // The team's gate: a paused job is left alone.
    let mut paused = parse_job(OPTED_IN_LLM, &[], &[], now).unwrap();
    paused
        .view
        .annotations
        .insert("rebound.dev/pause".into(), "true".into());
    let d = explain(&mut e, exit1("team-a"), Some(paused), 1, now);
    assert_eq!(
        d.jobs[0].skip.as_ref().map(|s| s.name()),
        Some("GateFalse"),
        "{:?}",
        d.jobs[0].reasons
    );
}

// --- broken copies -------------------------------------------------------------------------

/// Write `file` from samples/ with `from` replaced by `to` into a fresh temp
/// folder; return the folder.
fn broken_copy(tag: &str, file: &str, from: &str, to: &str) -> PathBuf {
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

fn assert_names(err: &str, parts: &[&str]) {
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

// --- through the real parsers --------------------------------------------------------------

/// A Kubernetes time `secs` seconds before `now`.
fn ago(now: DateTime<Utc>, secs: i64) -> String {
    (now - Duration::seconds(secs)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[test]
fn samples_classify_what_the_pod_parser_reports() {
    let now = Utc::now();
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "llm-worker-1", "namespace": "team-c", "uid": "u-1"},
        "spec": {"nodeName": "gpu-3", "containers": [{"name": "pytorch"}]},
        "status": {
            "phase": "Running",
            "startTime": ago(now, 600),
            "containerStatuses": [{
                "name": "pytorch", "image": "trainer", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": 137, "reason": "OOMKilled",
                    "startedAt": ago(now, 600), "finishedAt": ago(now, 5)
                }}
            }]
        }
    }))
    .expect("a Pod");
    let faults = rebound::fault::pod::pod_faults(&pod, now);
    assert_eq!(faults.len(), 1, "{faults:?}");
    let job = parse_job(
        "kind=PyTorchJob,name=llm,namespace=team-c,labels.kcover.io/cascading-recovery=true",
        &[],
        &[],
        now,
    )
    .unwrap();
    let d = explain(&mut engine(), faults[0].clone(), Some(job), 1, now);
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::RestartJob, "pod-exit/oom-killed")
    );
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    // A pod being deleted (rebound's own restart) reports nothing to classify.
    pod.metadata.deletion_timestamp = serde_json::from_value(json!(ago(now, 1))).ok();
    assert!(rebound::fault::pod::pod_faults(&pod, now).is_empty());
}

#[test]
fn samples_classify_what_the_node_parser_reports() {
    let now = Utc::now();
    // The controller's default --condition-types.
    let watched: Vec<String> = rebound::fault::node::DEFAULT_CONDITION_TYPES
        .split(',')
        .map(String::from)
        .collect();
    let node = |conditions: serde_json::Value| -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "gpu-7"}, "status": {"conditions": conditions}}),
        )
        .expect("a Node")
    };
    let decide_all = |n: &Node| -> Vec<(String, Level)> {
        let mut e = engine();
        rebound::fault::node::node_faults(n, &watched, now)
            .into_iter()
            .map(|f| {
                let code = f.code.clone();
                (code, explain(&mut e, f, None, 1, now).level)
            })
            .collect()
    };
    // A dead kubelet: Ready Unknown since 5 minutes, heartbeat older still.
    let dead = node(json!([
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
         "lastTransitionTime": ago(now, 300), "lastHeartbeatTime": ago(now, 340)}
    ]));
    assert_eq!(
        decide_all(&dead),
        [("NotReady".to_string(), Level::ResetDevice)]
    );
    // Just gone NotReady: not yet.
    let blip = node(json!([
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
         "lastTransitionTime": ago(now, 20), "lastHeartbeatTime": ago(now, 5)}
    ]));
    assert_eq!(decide_all(&blip), [("NotReady".to_string(), Level::Ignore)]);
    // node-problem-detector and rebound's agent on one node.
    let sick = node(json!([
        {"type": "Ready", "status": "True", "lastTransitionTime": ago(now, 9000)},
        {"type": "KernelDeadlock", "status": "True", "reason": "DockerHung", "lastTransitionTime": ago(now, 60)},
        {"type": "FrequentKubeletRestart", "status": "True", "lastTransitionTime": ago(now, 60)},
        {"type": "GpuFault", "status": "True", "reason": "Xid", "lastTransitionTime": ago(now, 30),
         "message": "source=NvidiaXid code=79 device=3 | GPU has fallen off the bus\nnot a rebound line"}
    ]));
    let got: BTreeMap<String, Level> = decide_all(&sick).into_iter().collect();
    assert_eq!(got.get("KernelDeadlock"), Some(&Level::Separate), "{got:?}");
    assert_eq!(
        got.get("FrequentKubeletRestart"),
        Some(&Level::PreSeparate),
        "{got:?}"
    );
    assert_eq!(got.get("79"), Some(&Level::Separate), "{got:?}");
    assert_eq!(
        got.get("GpuFault"),
        Some(&Level::PreSeparate),
        "an unreadable line: {got:?}"
    );
}

#[test]
fn samples_classify_what_the_event_parser_reports() {
    let now = Utc::now();
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"name": "llm-worker-1.1", "namespace": "team-a",
                     "annotations": {"kcover.io/need-recovery": "true"}},
        "involvedObject": {"kind": "Pod", "name": "llm-worker-1", "namespace": "team-a"},
        "reason": "DCGMDiagFailed",
        "message": "dcgmi diag -r 1 failed on GPU 2",
        "lastTimestamp": ago(now, 2)
    }))
    .expect("an Event");
    let f = rebound::fault::event::event_fault(&ev, ROOT_NS, now)
        .expect("a fault")
        .expect("readable");
    assert_eq!(f.source, FaultSource::KubeEvent);
    let job = parse_job(OPTED_IN_LLM, &[], &[], now).unwrap();
    let d = explain(&mut engine(), f, Some(job), 1, now);
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::RestartJob, "kube-event/kcover-need-recovery")
    );
    assert!(d.jobs[0].acts(), "{:?}", d.jobs);
}

#[test]
fn samples_follow_the_ascend_device_plugins_own_level() {
    // The plugin's level name arrives as the reason and wins over the table,
    // so a site's customised faultCode.json is followed.
    let level = |fault: &str| classify_once(fault);
    let d = level("source=AscendNpu,code=80E18402,reason=SeparateNPU,node=n,device=4");
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::Separate, "ascend-npu/plugin-says-separate")
    );
    let d = level("source=AscendNpu,code=80E18402,reason=NotHandleFault,node=n,device=4");
    assert_eq!(
        d.level,
        Level::Ignore,
        "a site that lowered 80E18402 is followed"
    );
    let d = level("source=AscendNpu,code=81078603,reason=PreSeparateNPU,node=n,device=0");
    assert_eq!(
        d.level,
        Level::PreSeparate,
        "the plugin's duration escalation is followed"
    );
    let d = level("source=AscendNpu,code=ManuallySeparateNPU,node=n,device=0");
    assert_eq!(d.level, Level::Separate);
    let d = level("source=AscendNpu,code=DEADBEEF,node=n,device=0");
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::PreSeparate, "ascend-npu/defaultLevel")
    );

    // End to end: the documented Atlas A3 device-info value through the parser.
    let Some(value) = read_data(A3_FAULTY_JSON) else {
        return;
    };
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(format!(
        "{}a3-node-9",
        rebound::fault::ascend::DEVICEINFO_PREFIX
    ));
    cm.metadata.namespace = Some(rebound::fault::ascend::DEVICEINFO_NAMESPACE.to_string());
    cm.data = Some(
        [(
            rebound::fault::ascend::DEVICEINFO_KEY.to_string(),
            value.trim().to_string(),
        )]
        .into(),
    );
    let now = Utc::now();
    let faults = rebound::fault::ascend::deviceinfo_faults(&cm, now).expect("parses");
    let mut e = engine();
    let got: BTreeMap<(String, String), Level> = faults
        .into_iter()
        .map(|f| {
            let key = (f.device.clone().unwrap_or_default(), f.code.clone());
            (
                key,
                explain(
                    &mut e,
                    f,
                    Some(parse_job(OPTED_IN_LLM, &[], &[], now).unwrap()),
                    1,
                    now,
                )
                .level,
            )
        })
        .collect();
    let at = |dev: &str, code: &str| got.get(&(dev.to_string(), code.to_string())).copied();
    assert_eq!(at("4", "80E18402"), Some(Level::Separate), "{got:?}");
    assert_eq!(at("4", "A8028801"), Some(Level::Separate), "{got:?}");
    assert_eq!(at("0", "81078603"), Some(Level::PreSeparate), "{got:?}");
    assert_eq!(got.values().max(), Some(&Level::Separate));
}
