//! The node agent against recorded real data (`../shared/data/faults`) and a
//! mocked API server.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use rebound::agent::dcgm::{self, DiagFailure};
use rebound::agent::fault::{Accelerator, SourceEvent};
use rebound::agent::kmsg::{KmsgLine, parse_line};
use rebound::agent::pci::{DeviceMap, PciAddr};
use rebound::agent::state::{FoldConfig, FoldState};
use rebound::agent::xid::KmsgScanner;
use rebound::agent::{AgentArgs, npusmi};

fn data(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/faults/"
    ))
    .join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("notice: {} absent; test skipped", p.display());
        None
    }
}

fn read(rel: &str) -> Option<String> {
    data(rel)
        .map(|p| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
}

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

/// xorshift64*: random inputs without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Random bytes and mutated real lines never panic any parser, and the
/// scanner stays within its bounds.
#[test]
fn hostile_input_never_panics() {
    let seeds = [
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x1}",
        "NVRM: The NVIDIA GPU 0000:b3:00.0",
        "NVRM: fallen off the bus and is not responding to commands.",
        "4,1227,437812449,c;NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.",
        "| 0     xxx                 | Warning            | 73.1 |",
        "{\"DCGM GPU Diagnostic\":{\"test_categories\":[{\"tests\":[{\"name\":\"x\",\"results\":[{\"status\":\"FAIL\",\"gpu_ids\":\"0,1\"}]}]}]}}",
    ];
    let alphabet = b"NVRM: XidSX()PCI0123456789abcdef,.;|{}[]\"\n \t\xff\xc3\xa9";
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut scanner = KmsgScanner::new(DeviceMap::default());
    for i in 0..20_000u64 {
        let mut bytes: Vec<u8> = seeds[(rng.next() % seeds.len() as u64) as usize]
            .as_bytes()
            .to_vec();
        let edits = rng.next() % 8;
        for _ in 0..edits {
            let pos = (rng.next() as usize) % (bytes.len() + 1);
            match rng.next() % 3 {
                0 if pos < bytes.len() => {
                    bytes.remove(pos);
                }
                1 => bytes.insert(pos, alphabet[(rng.next() as usize) % alphabet.len()]),
                _ if pos < bytes.len() => bytes[pos] = rng.next() as u8,
                _ => {}
            }
        }
        if i % 1000 == 0 {
            bytes.extend(std::iter::repeat_n(b'x', 10_000));
        }
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_line(&text);
        let _ = scanner.push(&text);
        let _ = dcgm::parse_diag(&text);
        let _ = dcgm::parse_health(&text);
        let _ = npusmi::parse_info(&text);
        let _ = npusmi::parse_health(&text);
        let _ = PciAddr::parse(&text);
        // What the fuzz target does with the raw bytes.
        let mut fresh = KmsgScanner::new(DeviceMap::default());
        let found = fresh.scan(bytes.as_slice()).expect("in-memory read");
        assert!(found.len() as u64 <= fresh.lines);
    }
    // Pure random bytes too.
    for _ in 0..5_000 {
        let len = (rng.next() % 300) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let text = String::from_utf8_lossy(&bytes);
        let _ = scanner.push(&text);
        let _ = dcgm::parse_diag(&text);
    }
    assert_eq!(scanner.lines, 25_000);
}

/// `rebound agent --kmsg-file F --once --dry-run` as a library call.
#[tokio::test]
async fn dry_run_reports_folded_faults_from_a_file() {
    let _watchdog = crate::watchdog::start();
    let dir = std::env::temp_dir().join(format!("rebound-agent-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let log = dir.join("kmsg.txt");
    std::fs::write(
        &log,
        "[  10.000001] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=train, DBE (0x1)\n\
         [  10.000002] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=train, DBE (0x2)\n\
         6,3964,206764307,-;nvidia-nvswitch2: open (major=510)\n\
         [  11.000000] NVRM: Xid (PCI:0000:5e:00): 13, pid=2, name=x, Graphics Exception\n\
         NVRM: Xid (PCI:0000:5e:00): not-a-number\n",
    )
    .expect("write");
    let args = AgentArgs::from_args([
        "--node-name",
        "gpu-node-1",
        "--kmsg-file",
        log.to_str().expect("utf-8 path"),
        "--once",
        "--dry-run",
        "--dcgm",
        "false",
        "--nvml",
        "false",
        "--nvidia-proc-dir",
        "/nonexistent",
        "--pci-map",
        "0000:3b:00.0=0,0000:5e:00.0=1",
    ])
    .expect("flags");
    let report = rebound::agent::dry_run(&args).await.expect("dry run");
    let _ = std::fs::remove_dir_all(&dir);
    let got: Vec<_> = report
        .faults
        .iter()
        .map(|f| {
            (
                f.fault.code.as_str(),
                f.fault.device.as_deref(),
                f.count,
                f.condition,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("48", Some("0"), 2, "GpuFault"),
            ("13", Some("1"), 1, "GpuFault")
        ]
    );
    assert_eq!(report.faults[0].fault.node.as_deref(), Some("gpu-node-1"));
    assert_eq!(report.parse_errors, 1);
    assert_eq!(report.conditions[0].status, "True");
    assert_eq!(report.conditions[0].reason, "GpuXid");
    let first = report.conditions[0]
        .message
        .lines()
        .next()
        .unwrap_or_default();
    assert_eq!(
        without_occurrence(first),
        "source=NvidiaXid code=48 device=0 | Xid 48 on GPU 0000:3b:00.0: pid=1, name=train, DBE (0x2)"
    );
    // The line names its occurrences: when first seen, and the repeat.
    assert!(first.contains(" at=") && first.contains(" n=2 "), "{first}");
    assert_eq!(report.conditions[1].status, "False");
}

#[test]
fn fold_report_counts_parse_errors() {
    let now = SystemTime::now();
    let r = rebound::agent::run::fold_report(
        &[SourceEvent::ParseErrors {
            source: "kmsg",
            n: 3,
        }],
        "n",
        FoldConfig {
            quiet_period: Duration::from_secs(1),
            ..FoldConfig::default()
        },
        now,
    );
    assert_eq!((r.parse_errors, r.faults.len()), (3, 0));
}

mod kube_mock {
    //! The reporter's requests against a scripted API server (tower-test).

    use std::time::{Duration, SystemTime};

    use http::{Request, Response};
    use kube::Client;
    use kube::client::Body;
    use rebound::agent::fault::{Accelerator, AgentFault};
    use rebound::agent::report::KubeReporter;
    use rebound::agent::state::DesiredCondition;
    use rebound::fault::wire::{FAULT_ANNOTATION, parse_annotation};
    use serde_json::{Value, json};
    use tower_test::mock::{self, Handle};

    type ApiHandle = Handle<Request<Body>, Response<Body>>;

    async fn expect(
        handle: &mut ApiHandle,
        method: &str,
        path: &str,
        reply: Value,
    ) -> (Option<String>, Value) {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method().as_str(), method);
        assert_eq!(req.uri().path(), path);
        let ctype = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = req.into_body().collect_bytes().await.expect("body");
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("json body")
        };
        send.send_response(
            Response::builder()
                .body(Body::from(serde_json::to_vec(&reply).expect("reply")))
                .expect("response"),
        );
        (ctype, body)
    }

    fn node(conditions: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-node-1", "uid": "node-uid-1"},
            "status": {"conditions": conditions}
        })
    }

    #[tokio::test]
    async fn conditions_and_events_are_written_as_the_controller_reads_them() {
        let _watchdog = crate::watchdog::start();
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let server = tokio::spawn(async move {
            // load_node: a kubelet condition and no GpuFault yet.
            expect(
                &mut handle,
                "GET",
                "/api/v1/nodes/gpu-node-1",
                node(json!([{"type": "Ready", "status": "True"}])),
            )
            .await;
            // The condition: strategic merge on nodes/status, merging by type.
            let (ctype, body) = expect(
                &mut handle,
                "PATCH",
                "/api/v1/nodes/gpu-node-1/status",
                node(json!([])),
            )
            .await;
            assert_eq!(
                ctype.as_deref(),
                Some("application/strategic-merge-patch+json")
            );
            let conds = body["status"]["conditions"].as_array().expect("conditions");
            assert_eq!(conds.len(), 1);
            assert_eq!(conds[0]["type"], "GpuFault");
            assert_eq!(conds[0]["status"], "True");
            assert_eq!(conds[0]["reason"], "GpuXid79");
            assert_eq!(
                conds[0]["message"],
                "source=NvidiaXid code=79 device=3 | Xid 79 on GPU 0000:91:00.0: GPU has fallen off the bus"
            );
            assert_eq!(conds[0]["lastTransitionTime"], "2027-01-15T08:00:00Z");
            // The Event, in kube-system, regarding the Node.
            let (_, ev) = expect(
                &mut handle,
                "POST",
                "/apis/events.k8s.io/v1/namespaces/kube-system/events",
                json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}, "eventTime": "2027-01-15T08:00:00.000000Z"}),
            )
            .await;
            assert_eq!(ev["reason"], "GpuXid");
            assert_eq!(ev["type"], "Warning");
            assert_eq!(ev["regarding"]["kind"], "Node");
            assert_eq!(ev["regarding"]["uid"], "node-uid-1");
            assert_eq!(ev["reportingController"], "rebound.dev/agent");
            let ann = ev["metadata"]["annotations"][FAULT_ANNOTATION]
                .as_str()
                .expect("annotation");
            let wire = parse_annotation(ann).expect("wire fault");
            assert_eq!(
                (
                    wire.source.as_str(),
                    wire.code.as_str(),
                    wire.node.as_deref(),
                    wire.device.as_deref()
                ),
                ("NvidiaXid", "79", Some("gpu-node-1"), Some("3"))
            );
            let name = ev["metadata"]["name"].as_str().expect("name").to_string();
            // A folded repeat: a merge patch of the series count.
            let (ctype, series) = expect(
                &mut handle,
                "PATCH",
                &format!("/apis/events.k8s.io/v1/namespaces/kube-system/events/{name}"),
                json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name}, "eventTime": "2027-01-15T08:00:00.000000Z"}),
            )
            .await;
            assert_eq!(ctype.as_deref(), Some("application/merge-patch+json"));
            assert_eq!(
                series,
                json!({"series": {"count": 7, "lastObservedTime": "2027-01-15T08:01:00.000000Z"}})
            );
            // Clearing: status False, a transition again.
            let (_, body) = expect(
                &mut handle,
                "PATCH",
                "/api/v1/nodes/gpu-node-1/status",
                node(json!([])),
            )
            .await;
            let c = &body["status"]["conditions"][0];
            assert_eq!(
                (
                    c["status"].as_str(),
                    c["reason"].as_str(),
                    c["message"].as_str()
                ),
                (Some("False"), Some("GpuHealthy"), Some(""))
            );
            assert!(c.get("lastTransitionTime").is_some());
        });

        let mut r = KubeReporter::new(client, "gpu-node-1", "kube-system");
        let existing = r.load_node().await.expect("node read");
        assert!(existing.is_empty());
        let fault = AgentFault {
            family: Accelerator::Gpu,
            source: "NvidiaXid",
            code: "79".into(),
            device: Some("3".into()),
            reason: "GpuXid",
            message: "Xid 79 on GPU 0000:91:00.0: GPU has fallen off the bus".into(),
        };
        let faulty = DesiredCondition {
            type_: "GpuFault",
            status: true,
            reason: "GpuXid79".into(),
            message: rebound::fault::wire::format_condition_message(&[fault.to_wire("gpu-node-1")]),
        };
        assert!(r.write_condition(&faulty, t).await.expect("written"));
        // Unchanged: no request.
        assert!(!r.write_condition(&faulty, t).await.expect("skipped"));
        let name = r.create_event(&fault, 1, t, t).await.expect("event");
        assert!(name.starts_with("gpu-node-1."));
        r.update_series(&name, 7, t + Duration::from_secs(60))
            .await
            .expect("series");
        let healthy = DesiredCondition {
            type_: "GpuFault",
            status: false,
            reason: "GpuHealthy".into(),
            message: String::new(),
        };
        assert!(
            r.write_condition(&healthy, t + Duration::from_secs(700))
                .await
                .expect("cleared")
        );
        server.await.expect("server script");
    }

    #[tokio::test]
    async fn existing_condition_is_read_back_and_healthy_absent_condition_is_not_written() {
        let _watchdog = crate::watchdog::start();
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let server = tokio::spawn(async move {
            expect(
                &mut handle,
                "GET",
                "/api/v1/nodes/gpu-node-1",
                node(json!([{
                    "type": "NpuFault", "status": "True", "reason": "NpuFaultA4025021",
                    "message": "source=AscendNpu code=A4025021 device=0 | NPU 0 health Alarm",
                    "lastHeartbeatTime": "2027-01-15T08:00:00Z"
                }])),
            )
            .await;
        });
        let mut r = KubeReporter::new(client, "gpu-node-1", "default");
        let existing = r.load_node().await.expect("read");
        server.await.expect("server");
        assert_eq!(existing.len(), 1);
        assert_eq!(existing[0].family, Accelerator::Npu);
        assert_eq!(existing[0].faults[0].code, "A4025021");
        let healthy_gpu = DesiredCondition {
            type_: "GpuFault",
            status: false,
            reason: "GpuHealthy".into(),
            message: String::new(),
        };
        // Never written, healthy: nothing to do (no request is scripted).
        assert!(
            !r.write_condition(&healthy_gpu, SystemTime::now())
                .await
                .expect("no write")
        );
    }

    fn once_args(log: &std::path::Path) -> rebound::agent::AgentArgs {
        rebound::agent::AgentArgs::from_args([
            "--node-name",
            "gpu-node-1",
            "--kmsg-file",
            log.to_str().expect("utf-8 path"),
            "--once",
            "--dcgm",
            "false",
            "--nvml",
            "false",
            "--nvidia-proc-dir",
            "/nonexistent",
            "--pci-map",
            "0000:3b:00.0=0,0000:5e:00.0=1",
            "--event-namespace",
            "kube-system",
        ])
        .expect("flags")
    }

    fn temp_log(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rebound-agent-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let log = dir.join("kmsg.txt");
        std::fs::write(&log, text).expect("write");
        log
    }

    /// `rebound agent --once` end to end: read the node, write the
    /// condition, one Event per distinct fault with its count.
    #[tokio::test]
    async fn once_run_writes_condition_then_one_event_per_fault() {
        let _watchdog = crate::watchdog::start();
        let log = temp_log(
            "once",
            "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 48, DBE\n[ 1.1] NVRM: Xid (PCI:0000:3b:00): 48, DBE\n\
             [ 2.0] NVRM: Xid (PCI:0000:5e:00): 13, Graphics Exception\n",
        );
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let server = tokio::spawn(async move {
            expect(
                &mut handle,
                "GET",
                "/api/v1/nodes/gpu-node-1",
                node(json!([{"type": "Ready", "status": "True"}])),
            )
            .await;
            let (_, body) = expect(
                &mut handle,
                "PATCH",
                "/api/v1/nodes/gpu-node-1/status",
                node(json!([])),
            )
            .await;
            let c = &body["status"]["conditions"][0];
            assert_eq!(
                (
                    c["type"].as_str(),
                    c["status"].as_str(),
                    c["reason"].as_str()
                ),
                (Some("GpuFault"), Some("True"), Some("GpuXid"))
            );
            let message = c["message"].as_str().unwrap_or_default();
            assert_eq!(
                message
                    .lines()
                    .map(super::without_occurrence)
                    .collect::<Vec<_>>(),
                [
                    "source=NvidiaXid code=48 device=0 | Xid 48 on GPU 0000:3b:00.0: DBE",
                    "source=NvidiaXid code=13 device=1 | Xid 13 on GPU 0000:5e:00.0: Graphics Exception"
                ]
            );
            assert!(
                message.lines().next().is_some_and(|l| l.contains(" n=2 ")),
                "{message}"
            );
            let reply = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "x"}, "eventTime": "2027-01-15T08:00:00.000000Z"});
            let (_, e13) = expect(
                &mut handle,
                "POST",
                "/apis/events.k8s.io/v1/namespaces/kube-system/events",
                reply.clone(),
            )
            .await;
            let (_, e48) = expect(
                &mut handle,
                "POST",
                "/apis/events.k8s.io/v1/namespaces/kube-system/events",
                reply,
            )
            .await;
            let code = |e: &Value| {
                parse_annotation(
                    e["metadata"]["annotations"][FAULT_ANNOTATION]
                        .as_str()
                        .expect("annotation"),
                )
                .expect("wire")
                .code
            };
            assert_eq!(
                (code(&e13), code(&e48)),
                ("13".to_string(), "48".to_string())
            );
            assert!(e13.get("series").is_none());
            assert_eq!(e48["series"]["count"], 2);
            assert!(handle.next_request().await.is_none(), "no other request");
        });
        rebound::agent::run_with_client(once_args(&log), Some(client))
            .await
            .expect("run");
        server.await.expect("server script");
        let _ = std::fs::remove_dir_all(log.parent().expect("dir"));
    }

    /// After a restart in the same boot, the faults of our condition are
    /// restored: no Event again, no write when nothing changed.
    #[tokio::test]
    async fn restart_restores_the_condition_without_writes() {
        let _watchdog = crate::watchdog::start();
        let log = temp_log("restart", "nothing here\n");
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(svc, "default");
        let server = tokio::spawn(async move {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            expect(
                &mut handle,
                "GET",
                "/api/v1/nodes/gpu-node-1",
                node(json!([{
                    "type": "GpuFault", "status": "True", "reason": "GpuXid79",
                    "message": "source=NvidiaXid code=79 device=0 at=2026-12-01T10:00:00.000Z n=1 | Xid 79 on GPU 0000:3b:00.0: GPU has fallen off the bus",
                    "lastHeartbeatTime": now, "lastTransitionTime": now
                }])),
            )
            .await;
            assert!(handle.next_request().await.is_none(), "nothing to write");
        });
        rebound::agent::run_with_client(once_args(&log), Some(client))
            .await
            .expect("run");
        server.await.expect("server script");
        let _ = std::fs::remove_dir_all(log.parent().expect("dir"));
    }
}

/// A followed file: lines appended later are read; a truncated file is read
/// again from the top.
#[tokio::test]
async fn followed_kmsg_file_picks_up_new_lines_and_truncation() {
    let _watchdog = crate::watchdog::start();
    use rebound::agent::sources::KmsgSource;
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("rebound-agent-follow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let log = dir.join("kmsg.txt");
    std::fs::write(&log, "boot noise\n").expect("write");
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    async fn next_fault(
        rx: &mut tokio::sync::mpsc::Receiver<SourceEvent>,
    ) -> rebound::agent::fault::AgentFault {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(SourceEvent::Fault { fault, .. })) => return fault,
                Ok(Some(_)) => continue,
                other => panic!("no fault: {other:?}"),
            }
        }
    }
    let _reader = KmsgSource {
        file: Some(log.clone()),
        once: false,
        map: DeviceMap::default(),
        poll: Duration::from_millis(20),
    }
    .spawn(tx)
    .expect("reader thread");
    {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("append");
        writeln!(
            f,
            "[ 5.0] NVRM: Xid (PCI:0000:3b:00): 31, pid=1, name=x, Ch 1"
        )
        .expect("line");
    }
    assert_eq!(next_fault(&mut rx).await.code, "31");
    std::fs::write(&log, "NVRM: Xid (PCI:0000:3b:00): 43, Ch 2\n").expect("truncate");
    assert_eq!(next_fault(&mut rx).await.code, "43");
    drop(rx);
    let _ = std::fs::remove_dir_all(&dir);
}

mod embedded {
    //! The agent against the embedded API server (`rebound_sim::server`):
    //! the strategic merge keeps the kubelet's conditions, Events are stored
    //! with their annotation, a restart writes nothing new.

    use k8s_openapi::api::core::v1::{Namespace, Node};
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
    use rebound::agent::report::KubeReporter;
    use rebound::agent::state::DesiredCondition;
    use rebound::fault::wire::{FAULT_ANNOTATION, parse_annotation, parse_condition_message};
    use rebound_sim::server::ApiServer;
    use serde_json::json;

    fn args(log: &std::path::Path) -> rebound::agent::AgentArgs {
        rebound::agent::AgentArgs::from_args([
            "--node-name",
            "gpu-node-1",
            "--kmsg-file",
            log.to_str().expect("utf-8 path"),
            "--once",
            "--dcgm",
            "false",
            "--nvml",
            "false",
            "--nvidia-proc-dir",
            "/nonexistent",
            "--pci-map",
            "0000:91:00.0=3",
            "--event-namespace",
            "kube-system",
        ])
        .expect("flags")
    }

    fn condition<'a>(
        node: &'a Node,
        type_: &str,
    ) -> Option<&'a k8s_openapi::api::core::v1::NodeCondition> {
        node.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == type_)
    }

    #[tokio::test]
    async fn conditions_and_events_on_the_embedded_server() {
        let _watchdog = crate::watchdog::start();
        let server = ApiServer::builder().start().await.expect("server");
        let client = server.client();
        let nodes: Api<Node> = Api::all(client.clone());
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "gpu-node-1"}})).expect("node"),
            )
            .await
            .expect("node created");
        nodes
            .patch_status(
                "gpu-node-1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": {"conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
                ]}})),
            )
            .await
            .expect("kubelet condition");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        if namespaces
            .get_opt("kube-system")
            .await
            .expect("get ns")
            .is_none()
        {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": "kube-system"}}))
                        .expect("ns"),
                )
                .await
                .expect("namespace");
        }

        let dir =
            std::env::temp_dir().join(format!("rebound-agent-embedded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let log = dir.join("kmsg.txt");
        std::fs::write(
            &log,
            "[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n\
             [6781741.548783] NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.\n\
             [6781753.400584] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n",
        )
        .expect("log");
        rebound::agent::run_with_client(args(&log), Some(client.clone()))
            .await
            .expect("first run");

        let node = nodes.get("gpu-node-1").await.expect("node");
        let ready = condition(&node, "Ready").expect("the kubelet's condition is kept");
        assert_eq!(ready.status, "True");
        let gpu = condition(&node, "GpuFault").expect("GpuFault");
        assert_eq!(gpu.status, "True");
        assert_eq!(gpu.reason.as_deref(), Some("MultipleFaults"));
        let listed: Vec<_> = parse_condition_message(gpu.message.as_deref().unwrap_or(""))
            .into_iter()
            .map(|r| r.expect("parses"))
            .map(|w| (w.source, w.code, w.device))
            .collect();
        assert_eq!(
            listed,
            [
                (
                    "NvidiaXid".to_string(),
                    "79".to_string(),
                    Some("3".to_string())
                ),
                (
                    "NvidiaXid".to_string(),
                    "20034".to_string(),
                    Some("nvswitch1".to_string())
                ),
            ]
        );
        assert!(gpu.last_transition_time.is_some());

        let events: Api<Event> = Api::namespaced(client.clone(), "kube-system");
        let mut evs = events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items;
        evs.sort_by_key(|e| e.reason.clone());
        let got: Vec<_> = evs
            .iter()
            .map(|e| {
                let ann = e
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(FAULT_ANNOTATION))
                    .expect("annotation");
                let w = parse_annotation(ann).expect("wire fault");
                (
                    e.reason.clone().unwrap_or_default(),
                    w.code,
                    w.node.unwrap_or_default(),
                    e.regarding
                        .as_ref()
                        .and_then(|r| r.name.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "GpuXid".into(),
                    "79".into(),
                    "gpu-node-1".into(),
                    "gpu-node-1".into()
                ),
                (
                    "NvSwitchSXid".into(),
                    "20034".into(),
                    "gpu-node-1".into(),
                    "gpu-node-1".into()
                ),
            ]
        );

        // A restart in the same boot: the faults are restored from the
        // condition; the sticky Xid 79 is read again from the log but makes
        // no new Event.
        rebound::agent::run_with_client(args(&log), Some(client.clone()))
            .await
            .expect("second run");
        assert_eq!(
            events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .len(),
            2
        );
        let again = nodes.get("gpu-node-1").await.expect("node");
        assert_eq!(
            condition(&again, "GpuFault").map(|c| c.message.clone()),
            Some(gpu.message.clone())
        );

        // Clearing keeps the other conditions.
        let mut reporter = KubeReporter::new(client.clone(), "gpu-node-1", "kube-system");
        reporter.load_node().await.expect("load");
        let healthy = DesiredCondition {
            type_: "GpuFault",
            status: false,
            reason: "GpuHealthy".into(),
            message: String::new(),
        };
        assert!(
            reporter
                .write_condition(&healthy, std::time::SystemTime::now())
                .await
                .expect("cleared")
        );
        let cleared = nodes.get("gpu-node-1").await.expect("node");
        assert_eq!(
            condition(&cleared, "GpuFault").map(|c| c.status.as_str()),
            Some("False")
        );
        assert_eq!(
            condition(&cleared, "Ready").map(|c| c.status.as_str()),
            Some("True")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The long-running loop: a fault appended to the followed log raises
    /// the condition at once; after the quiet period it clears by itself.
    #[tokio::test]
    async fn follow_loop_raises_then_clears_after_the_quiet_period() {
        let _watchdog = crate::watchdog::start();
        let server = ApiServer::builder().start().await.expect("server");
        let client = server.client();
        let nodes: Api<Node> = Api::all(client.clone());
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "gpu-node-2"}})).expect("node"),
            )
            .await
            .expect("node created");
        let dir = std::env::temp_dir().join(format!("rebound-agent-loop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let log = dir.join("kmsg.txt");
        std::fs::write(&log, "").expect("log");
        let args = rebound::agent::AgentArgs::from_args([
            "--node-name",
            "gpu-node-2",
            "--kmsg-file",
            log.to_str().expect("utf-8 path"),
            "--dcgm",
            "false",
            "--nvml",
            "false",
            "--nvidia-proc-dir",
            "/nonexistent",
            "--quiet-period",
            "1s",
            "--flush-interval",
            "100ms",
            "--metrics-addr",
            "",
            "--event-namespace",
            "default",
        ])
        .expect("flags");
        let agent = tokio::spawn(rebound::agent::run_with_client(args, Some(client.clone())));

        async fn wait_for(nodes: &Api<Node>, status: &str) -> std::time::Duration {
            let start = std::time::Instant::now();
            loop {
                let n = nodes.get("gpu-node-2").await.expect("node");
                if condition(&n, "GpuFault").map(|c| c.status.as_str()) == Some(status) {
                    return start.elapsed();
                }
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(10),
                    "GpuFault never {status}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        std::fs::write(&log, "NVRM: Xid (PCI:0000:3b:00): 31, pid=7, name=python, Ch 00000010, intr 10000000. MMU Fault\n")
            .expect("append");
        wait_for(&nodes, "True").await;
        let cleared_after = wait_for(&nodes, "False").await;
        assert!(
            cleared_after >= std::time::Duration::from_millis(500),
            "cleared too early: {cleared_after:?}"
        );
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        assert_eq!(
            events
                .list(&ListParams::default())
                .await
                .expect("events")
                .items
                .len(),
            1
        );
        agent.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A condition line without its occurrence tokens (`at=`, `n=`), which
/// carry times the tests do not fix.
fn without_occurrence(line: &str) -> String {
    let (head, text) = line.split_once(" | ").unwrap_or((line, ""));
    let head: Vec<&str> = head
        .split(' ')
        .filter(|t| !t.starts_with("at=") && !t.starts_with("n="))
        .collect();
    if text.is_empty() {
        head.join(" ")
    } else {
        format!("{} | {text}", head.join(" "))
    }
}
