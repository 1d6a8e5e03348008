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

mod recorded;

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
    // A repeated line says when its newest repeat happened (every reader
    // dates the repeat alike); a line seen once does not.
    assert!(first.contains(" last="), "{first}");
    let second = report.conditions[0]
        .message
        .lines()
        .nth(1)
        .unwrap_or_default();
    assert!(!second.contains(" last="), "{second}");
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

mod kube_mock;

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

mod embedded;

/// A condition line without its occurrence tokens (`at=`, `n=`), which
/// carry times the tests do not fix.
fn without_occurrence(line: &str) -> String {
    let (head, text) = line.split_once(" | ").unwrap_or((line, ""));
    let head: Vec<&str> = head
        .split(' ')
        .filter(|t| !t.starts_with("at=") && !t.starts_with("n=") && !t.starts_with("last="))
        .collect();
    if text.is_empty() {
        head.join(" ")
    } else {
        format!("{} | {text}", head.join(" "))
    }
}
