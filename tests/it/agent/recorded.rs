//! The agent's parsers against recorded real outputs: kernel logs (one fault
//! per incident, folding, noise), dcgmi diagnostics and npu-smi.

use super::*;

/// Every indexed line parses to exactly the kind, code and PCI address the
/// index gives.
#[test]
fn recorded_kernel_lines_match_the_index() {
    let (Some(text), Some(index)) = (
        read("kmsg/nvidia-xid-lines.txt"),
        read("kmsg/nvidia-xid-lines.index.tsv"),
    ) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut checked = 0;
    for row in index.lines().skip(1) {
        let cols: Vec<&str> = row.split('\t').collect();
        let n: usize = cols[0].parse().expect("line number");
        let (kind, code, pci) = (cols[1], cols[2], cols[3]);
        let line = lines[n - 1];
        let parsed = parse_line(line).unwrap_or_else(|e| panic!("line {n}: {e}"));
        let want_pci = (!pci.is_empty()).then(|| PciAddr::parse(pci).expect("index address"));
        match (kind, parsed) {
            (
                "xid",
                Some(KmsgLine::Xid {
                    pci: p, code: c, ..
                }),
            ) => {
                assert_eq!(
                    (Some(p), c.to_string()),
                    (want_pci, code.to_string()),
                    "line {n}"
                );
            }
            (
                "sxid",
                Some(KmsgLine::SXid {
                    pci: p, code: c, ..
                }),
            ) => {
                assert_eq!(
                    (Some(p), c.to_string()),
                    (want_pci, code.to_string()),
                    "line {n}"
                );
            }
            ("fallen_off_bus", Some(KmsgLine::FallenOffBus { pci: p })) => {
                assert_eq!((p, code), (want_pci, "79"), "line {n}");
            }
            ("fallen_off_bus_multiline_start", Some(KmsgLine::GpuIntro { pci: p })) => {
                assert_eq!(Some(p), want_pci, "line {n}");
            }
            // The middle line says nothing; the last one completes the record.
            (
                "fallen_off_bus_multiline_cont",
                None | Some(KmsgLine::FallenOffBus { pci: None }),
            ) => {}
            (k, other) => panic!("line {n} ({k}): {other:?}"),
        }
        checked += 1;
    }
    assert_eq!(checked, 71);
}

/// The whole file, as a stream: one fault per incident, with the device
/// index from the node's mapping.
#[test]
fn recorded_kernel_log_yields_one_fault_per_incident() {
    let Some(path) = data("kmsg/nvidia-xid-lines.txt") else {
        return;
    };
    let map = DeviceMap::parse_flag("0000:9b:00.0=4,0000:91:00.0=2,0000:b3:00.0=6").expect("map");
    let mut s = KmsgScanner::new(map);
    let file = std::fs::File::open(path).expect("open");
    let found = s.scan(std::io::BufReader::new(file)).expect("scan");
    assert_eq!(s.parse_errors, 0);
    let got: Vec<(String, Option<String>, &str)> = found
        .iter()
        .map(|f| (f.fault.code.clone(), f.fault.device.clone(), f.fault.reason))
        .collect();
    let count = |code: &str| got.iter().filter(|g| g.0 == code).count();
    // 5 Xid 119 lines on GPU 4 (mapped) and one elsewhere, all kept:
    // folding is the state's job.
    assert_eq!(got[0], ("119".into(), Some("4".into()), "GpuXid"));
    assert_eq!(count("119"), 6);
    // Xid 79 + "GPU 0000:91:00.0: GPU has fallen off the bus." = one incident;
    // plus line 58 (single-line), two 3-line records, and line 100.
    let fell: Vec<_> = got
        .iter()
        .filter(|g| g.0 == "79")
        .map(|g| g.1.clone())
        .collect();
    assert_eq!(
        fell,
        [
            Some("2".to_string()),
            Some("0000:29:00.0".into()),
            Some("0000:18:00.0".into()),
            Some("6".into()),
            Some("0000:44:00.0".into()),
        ]
    );
    // SXid 20034: 10 lines, of which the 4 Severity/Data detail lines that
    // follow an SXid of the same switch are not new faults (line 30's
    // switch 07:00.0 has no earlier line, so it stands).
    assert_eq!(count("20034"), 7);
    assert!(
        got.iter()
            .filter(|g| g.0 == "20034")
            .all(|g| g.2 == "NvSwitchSXid")
    );
    for sxid in [
        "12028", "20009", "24007", "28006", "26008", "26007", "12033",
    ] {
        assert_eq!(count(sxid), 1, "{sxid}");
    }
    assert_eq!(count("26006"), 2);
    assert_eq!(count("13"), 8);
    assert_eq!(count("149"), 9);
    assert_eq!(count("145"), 5);
    assert_eq!(count("154"), 6);
    assert_eq!(count("43"), 3);
    for x in ["14", "74", "32", "63", "109"] {
        assert_eq!(count(x), 1, "{x}");
    }
    // 71 indexed lines: 63 incidents (8 lines are parts of another).
    assert_eq!(found.len(), 63);
    // The /dev/kmsg records keep their boot-relative time.
    assert!(
        found
            .iter()
            .any(|f| f.record.is_some_and(|r| r.usec == 437812449))
    );
}

/// Folding the recorded log gives one active fault per (code, device).
#[test]
fn recorded_kernel_log_folds() {
    let Some(path) = data("kmsg/nvidia-xid-lines.txt") else {
        return;
    };
    let mut s = KmsgScanner::new(DeviceMap::default());
    let found = s
        .scan(std::io::BufReader::new(
            std::fs::File::open(path).expect("open"),
        ))
        .expect("scan");
    let now = SystemTime::now();
    let mut state = FoldState::new(FoldConfig::default());
    // Each record at its own time (the file has no kmsg headers): a
    // repeat is a later record.
    for (i, f) in found.iter().enumerate() {
        let at = now - Duration::from_secs(60) + Duration::from_millis(i as u64);
        state.observe(f.fault.clone(), at, now);
    }
    let active = state.active(Accelerator::Gpu);
    let xid119: Vec<_> = active.iter().filter(|e| e.fault.code == "119").collect();
    assert_eq!(xid119.len(), 2, "GPU 0000:9b:00 and 0002:00:00");
    assert_eq!(xid119.iter().map(|e| e.count).sum::<u64>(), 6);
    let c = state.condition(Accelerator::Gpu, "gpu-node-1");
    assert!(c.status);
    assert_eq!(c.reason, "MultipleFaults");
    assert_eq!(
        c.message.lines().count(),
        rebound::agent::state::MAX_FAULTS_IN_MESSAGE
    );
    for parsed in rebound::fault::wire::parse_condition_message(&c.message) {
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}

#[test]
fn noise_lines_produce_nothing() {
    let Some(text) = read("kmsg/noise-lines.txt") else {
        return;
    };
    let mut s = KmsgScanner::new(DeviceMap::default());
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert_eq!(parse_line(line), Ok(None), "{line}");
        assert_eq!(s.push(line), None, "{line}");
        n += 1;
    }
    assert_eq!(n, 120);
    assert_eq!(s.parse_errors, 0);
}

fn failures(rel: &str) -> Option<Vec<DiagFailure>> {
    read(rel).map(|t| dcgm::parse_diag(&t).unwrap_or_else(|e| panic!("{rel}: {e}")))
}

fn short(f: &[DiagFailure]) -> Vec<(Option<&str>, &str)> {
    f.iter()
        .map(|d| (d.gpu.as_deref(), d.test.as_str()))
        .collect()
}

#[test]
fn dcgm_recorded_outputs_give_the_exact_failed_tests() {
    let Some(v17) = failures("dcgm/dcgmi-diag-json-v1.7-per-gpu-pass-fail-skip.json") else {
        return;
    };
    assert_eq!(
        short(&v17),
        [
            (Some("0"), "sm_stress"),
            (Some("2"), "sm_stress"),
            (Some("3"), "sm_stress")
        ]
    );
    assert!(
        v17[0]
            .message
            .starts_with("Max stress level of 2128.7 did not exceed"),
        "{}",
        v17[0].message
    );
    let fault = v17[1].to_fault();
    assert_eq!(
        (
            fault.source,
            fault.code.as_str(),
            fault.device.as_deref(),
            fault.reason
        ),
        (
            "NodeCondition",
            "dcgm-sm_stress",
            Some("2"),
            "DcgmDiagFailed"
        )
    );

    let v31 =
        failures("dcgm/dcgmi-diag-json-v3.1.0-pass-8gpu.json").expect("present with the others");
    assert!(v31.is_empty());
    assert!(
        failures("dcgm/dcgmi-diag-json-legacy-level1-pass.json")
            .expect("present")
            .is_empty()
    );
    // Warn is not a fault.
    assert!(
        failures("dcgm/dcgmi-diag-json-legacy-level1-warn.json")
            .expect("present")
            .is_empty()
    );
    let fail = failures("dcgm/dcgmi-diag-json-legacy-level1-fail.json").expect("present");
    assert_eq!(short(&fail), [(None, "Persistence Mode")]);
    assert_eq!(fail[0].to_fault().code, "dcgm-persistence_mode");
}

#[test]
fn npu_smi_recorded_outputs_parse() {
    let (Some(table), Some(after)) = (
        read("ascend/npu-smi-info-sample.txt"),
        read("ascend/faultdiag-npu-info-after.txt"),
    ) else {
        return;
    };
    let (faulty, healthy) = table
        .split_once("# --- block 2")
        .expect("two blocks in the sample");
    let rows = npusmi::parse_info(faulty);
    let summary: Vec<_> = rows
        .iter()
        .map(|r| (r.npu, r.health.as_str(), r.bus_id.map(|b| b.to_string())))
        .collect();
    assert_eq!(
        summary,
        [
            (0, "Warning", Some("0000:61:00.0".to_string())),
            (7, "OK", Some("0000:3d:00.0".to_string())),
        ]
    );
    assert!(npusmi::parse_info(healthy).iter().all(|r| !r.unhealthy()));

    let health_part = after
        .split("-t health")
        .nth(1)
        .expect("health section present");
    let d = npusmi::parse_health(health_part);
    assert_eq!(d.status, "Alarm");
    assert_eq!(d.codes, ["A4025021", "8C03A000", "8C084E00"]);
    assert!(
        d.info
            .starts_with("ascend_monitor adda heart beat lost error")
    );
    let f = npusmi::faults(&rows[0], Some(&d));
    let codes: Vec<_> = f
        .iter()
        .map(|f| (f.source, f.code.as_str(), f.device.as_deref()))
        .collect();
    assert_eq!(
        codes,
        [
            ("AscendNpu", "A4025021", Some("0")),
            ("AscendNpu", "8C03A000", Some("0")),
            ("AscendNpu", "8C084E00", Some("0")),
        ]
    );
    assert!(f.iter().all(|f| f.family == Accelerator::Npu));
}
