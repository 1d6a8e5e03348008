//! The NVIDIA XID samples: each XID's level and action as the samples
//! promise, and every catalog XID with a rule matching NVIDIA's action.

use super::*;

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
