//! The source loops: each reads one input and sends [`SourceEvent`]s.
//!
//! The kernel-log reader runs on its own OS thread (a blocking read of
//! `/dev/kmsg` cannot be cancelled, and a detached thread does not hold up
//! shutdown); the tool pollers are async tasks. Each run ends with a
//! [`SourceExit`] that whoever runs it (the supervisor, or the one-shot
//! read) turns into the source's state: a source says `Up` and what it
//! finds itself, and a poller says `Failed` for a round that failed (it
//! goes on polling), but never reports its own end.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::Sender;

use super::cmd::CmdError;
use super::dcgm::{self, DcgmError};
use super::dcgm_exporter::{self, ExporterState};
use super::fault::SourceEvent;
use super::kmsg::MAX_LINE_BYTES;
use super::npusmi;
use super::pci::DeviceMap;
use super::supervise::SourceExit;
use super::xid::{KmsgScanner, ScannedFault, read_bounded_line};

/// Where the kernel log is read from when no file is given.
pub const DEV_KMSG: &str = "/dev/kmsg";

/// The node's boot time from `/proc/uptime` (host-wide, also in a
/// container), to date `/dev/kmsg` records.
pub fn boot_time(now: SystemTime) -> Option<SystemTime> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    now.checked_sub(Duration::from_secs_f64(secs))
}

/// When a scanned fault happened: boot + the record's monotonic time for
/// `/dev/kmsg` records, else now (a file's timestamps are not this boot's).
pub fn fault_time(f: &ScannedFault, boot: Option<SystemTime>, now: SystemTime) -> SystemTime {
    match (f.record, boot) {
        (Some(r), Some(b)) => (b + Duration::from_micros(r.usec)).min(now),
        _ => now,
    }
}

/// Settings of the kernel-log reader.
#[derive(Clone, Debug)]
pub struct KmsgSource {
    /// A file instead of `/dev/kmsg`.
    pub file: Option<PathBuf>,
    /// Read to the end and stop, instead of following.
    pub once: bool,
    /// PCI → index.
    pub map: DeviceMap,
    /// How often a followed file is checked for new lines.
    pub poll: Duration,
}

impl KmsgSource {
    /// Start the reader on its own thread, unsupervised (tests).
    pub fn spawn(
        self,
        tx: Sender<SourceEvent>,
    ) -> std::io::Result<std::thread::JoinHandle<SourceExit>> {
        std::thread::Builder::new()
            .name("rebound-kmsg".into())
            .spawn(move || self.run_blocking(&tx))
    }

    /// Read until done (`once`), the receiver is gone, or reading fails
    /// (the error, with the path, is the exit).
    pub fn run_blocking(&self, tx: &Sender<SourceEvent>) -> SourceExit {
        let mut scanner = KmsgScanner::new(self.map.clone());
        let up = || tx.blocking_send(SourceEvent::Up { source: "kmsg" }).is_ok();
        let result = match &self.file {
            Some(path) => File::open(path).and_then(|f| {
                if !up() {
                    return Ok(());
                }
                self.follow_file(path, f, &mut scanner, tx)
            }),
            None => {
                let boot = boot_time(SystemTime::now());
                open_kmsg(self.once).and_then(|f| {
                    if !up() {
                        return Ok(());
                    }
                    read_kmsg_records(f, self.once, boot, &mut scanner, tx)
                })
            }
        };
        match result {
            _ if tx.is_closed() => SourceExit::ReceiverGone,
            Ok(()) => SourceExit::Done,
            Err(e) => SourceExit::Failed(format!(
                "reading the kernel log {}: {e}",
                self.file
                    .as_deref()
                    .unwrap_or(Path::new(DEV_KMSG))
                    .display()
            )),
        }
    }

    fn follow_file(
        &self,
        path: &Path,
        file: File,
        scanner: &mut KmsgScanner,
        tx: &Sender<SourceEvent>,
    ) -> std::io::Result<()> {
        let mut reader = BufReader::new(file);
        let mut buf = Vec::with_capacity(256);
        loop {
            while read_bounded_line(&mut reader, &mut buf)? {
                let line = String::from_utf8_lossy(&buf);
                if !emit(scanner, &line, None, tx) {
                    return Ok(());
                }
            }
            if self.once || tx.is_closed() {
                return Ok(());
            }
            std::thread::sleep(self.poll);
            // Truncated or rotated: start again from the top.
            let pos = reader.stream_position()?;
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(pos);
            if len < pos {
                reader = BufReader::new(File::open(path)?);
            }
        }
    }
}

fn open_kmsg(once: bool) -> std::io::Result<File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(target_os = "linux")]
    if once {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: stop at the end of the ring buffer instead of waiting.
        opts.custom_flags(0o4000);
    }
    let _ = once;
    opts.open(DEV_KMSG)
}

/// `/dev/kmsg` returns one record per read; EPIPE means records were
/// overwritten before we read them (counted, then reading goes on).
fn read_kmsg_records(
    mut f: File,
    once: bool,
    boot: Option<SystemTime>,
    scanner: &mut KmsgScanner,
    tx: &Sender<SourceEvent>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_LINE_BYTES * 2];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                let rec = &buf[..n];
                // The first line is the record; ` KEY=value` lines follow.
                let end = rec.iter().position(|&b| b == b'\n').unwrap_or(n);
                let line = String::from_utf8_lossy(&rec[..end.min(MAX_LINE_BYTES)]);
                if !emit(scanner, &line, boot, tx) {
                    return Ok(());
                }
            }
            Err(e) if e.raw_os_error() == Some(32) => {
                tracing::debug!("kernel log records overwritten before read");
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && once => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Scan one line and send what it yields; `false` when the receiver is gone.
fn emit(
    scanner: &mut KmsgScanner,
    line: &str,
    boot: Option<SystemTime>,
    tx: &Sender<SourceEvent>,
) -> bool {
    let errors = scanner.parse_errors;
    let found = scanner.push(line);
    if scanner.parse_errors > errors {
        if let Some(e) = &scanner.last_error {
            tracing::debug!(error = %e, "unparsed kernel-log line");
        }
        if tx
            .blocking_send(SourceEvent::ParseErrors {
                source: "kmsg",
                n: scanner.parse_errors - errors,
            })
            .is_err()
        {
            return false;
        }
    }
    match found {
        Some(f) => {
            let now = SystemTime::now();
            let at = fault_time(&f, boot, now);
            let timed = f.record.is_some() && boot.is_some();
            tx.blocking_send(SourceEvent::Fault {
                fault: f.fault,
                at,
                timed,
            })
            .is_ok()
        }
        None => true,
    }
}

/// Settings of the DCGM poller.
#[derive(Clone, Debug)]
pub struct DcgmSource {
    /// `dcgmi` binary.
    pub binary: String,
    /// `diag -r` level.
    pub level: u8,
    /// Time between runs.
    pub interval: Duration,
    /// Longest run.
    pub timeout: Duration,
    /// Also `dcgmi health -c -j`.
    pub health: bool,
    /// Run `dcgmi diag` also while compute processes run on the GPUs (a
    /// job training). Off by default: diag loads the GPUs it tests.
    pub diag_while_busy: bool,
    /// Whether a compute process runs on any GPU now (`None`: cannot tell,
    /// e.g. no NVML; diag then runs as configured), given the NVML library
    /// path below. NVML's answer in the agent, a fixed one in tests.
    pub busy: fn(Option<&Path>) -> Option<bool>,
    /// `--nvml-library`.
    pub nvml_library: Option<PathBuf>,
}

/// What a send into a closed channel means to a source: its end.
type Sent = Result<(), tokio::sync::mpsc::error::SendError<SourceEvent>>;

/// A poller's round: `None` to poll again after the interval, else how the
/// source ends (its tool is missing, or the receiver is gone).
fn round_end(
    sent: Result<Option<SourceExit>, tokio::sync::mpsc::error::SendError<SourceEvent>>,
) -> Option<SourceExit> {
    sent.unwrap_or(Some(SourceExit::ReceiverGone))
}

/// Poll with `round` every `interval` until a round ends the source.
async fn poll_every<F, Fut>(interval: Duration, mut round: F) -> SourceExit
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<SourceExit>>,
{
    loop {
        if let Some(exit) = round().await {
            return exit;
        }
        tokio::time::sleep(interval).await;
    }
}

async fn send_faults(
    tx: &Sender<SourceEvent>,
    faults: Vec<super::fault::AgentFault>,
    at: SystemTime,
) -> Sent {
    for fault in faults {
        tx.send(SourceEvent::Fault {
            fault,
            at,
            timed: false,
        })
        .await?;
    }
    Ok(())
}

fn missing(what: &str, binary: &str) -> SourceExit {
    SourceExit::Unavailable(format!("{what} not found ({binary}); the source is off"))
}

impl DcgmSource {
    /// Run once: `None` to go on, or how the source ends (`dcgmi` missing,
    /// the receiver gone). `dcgmi diag` is skipped while the GPUs are busy
    /// unless `diag_while_busy`; `dcgmi health` only reads the hostengine's
    /// watches and always runs. A run that fails is `Failed` (the source
    /// goes on and says `Up` after the next good run).
    pub async fn poll(&self, tx: &Sender<SourceEvent>) -> Option<SourceExit> {
        round_end(self.round(tx).await)
    }

    async fn round(
        &self,
        tx: &Sender<SourceEvent>,
    ) -> Result<Option<SourceExit>, tokio::sync::mpsc::error::SendError<SourceEvent>> {
        let source = "dcgm";
        let now = SystemTime::now();
        let skip_diag = !self.diag_while_busy && {
            let (busy, lib) = (self.busy, self.nvml_library.clone());
            tokio::task::spawn_blocking(move || busy(lib.as_deref()))
                .await
                .ok()
                .flatten()
                == Some(true)
        };
        if skip_diag {
            tracing::info!("compute processes run on the GPUs; dcgmi diag skipped this round");
        }
        let diag = if skip_diag {
            None
        } else {
            Some(dcgm::run_diag(&self.binary, self.level, self.timeout).await)
        };
        match diag {
            None => {}
            Some(Ok(failures)) => {
                tx.send(SourceEvent::Up { source }).await?;
                send_faults(tx, failures.iter().map(|f| f.to_fault()).collect(), now).await?;
            }
            Some(Err(DcgmError::Cmd(CmdError::Missing { binary }))) => {
                return Ok(Some(missing("dcgmi", &binary)));
            }
            Some(Err(e @ (DcgmError::Json { .. } | DcgmError::Shape))) => {
                tracing::warn!(error = %e, "dcgmi diag output not understood");
                tx.send(SourceEvent::ParseErrors { source, n: 1 }).await?;
                tx.send(SourceEvent::Failed {
                    source,
                    error: format!("dcgmi diag output not understood: {e}"),
                })
                .await?;
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "dcgmi diag failed");
                tx.send(SourceEvent::Failed {
                    source,
                    error: format!("dcgmi diag failed: {e}"),
                })
                .await?;
            }
        }
        if self.health {
            match dcgm::run_health(&self.binary, self.timeout).await {
                Ok(failures) => {
                    send_faults(tx, failures.iter().map(|f| f.to_fault()).collect(), now).await?;
                }
                Err(DcgmError::Cmd(CmdError::Missing { binary })) if skip_diag => {
                    return Ok(Some(missing("dcgmi", &binary)));
                }
                Err(e) => tracing::debug!(error = %e, "dcgmi health gave nothing usable"),
            }
        }
        Ok(None)
    }

    /// Poll every interval until `dcgmi` is found missing or the receiver is gone.
    pub async fn run(self, tx: Sender<SourceEvent>) -> SourceExit {
        poll_every(self.interval, || self.poll(&tx)).await
    }
}

/// Settings of the `npu-smi` poller.
#[derive(Clone, Debug)]
pub struct NpuSmiSource {
    /// `npu-smi` binary.
    pub binary: String,
    /// Time between polls.
    pub interval: Duration,
    /// Longest run.
    pub timeout: Duration,
}

impl NpuSmiSource {
    /// Run once: `None` to go on, or how the source ends (`npu-smi`
    /// missing, the receiver gone). A failed run is `Failed`.
    pub async fn poll(&self, tx: &Sender<SourceEvent>) -> Option<SourceExit> {
        round_end(self.round(tx).await)
    }

    async fn round(
        &self,
        tx: &Sender<SourceEvent>,
    ) -> Result<Option<SourceExit>, tokio::sync::mpsc::error::SendError<SourceEvent>> {
        let source = "npusmi";
        let now = SystemTime::now();
        match npusmi::collect(&self.binary, self.timeout).await {
            Ok(faults) => {
                tx.send(SourceEvent::Up { source }).await?;
                send_faults(tx, faults, now).await?;
            }
            Err(CmdError::Missing { binary }) => return Ok(Some(missing("npu-smi", &binary))),
            Err(e) => {
                tracing::warn!(error = %e, "npu-smi failed");
                tx.send(SourceEvent::Failed {
                    source,
                    error: format!("npu-smi failed: {e}"),
                })
                .await?;
            }
        }
        Ok(None)
    }

    /// Poll every interval until `npu-smi` is found missing or the receiver is gone.
    pub async fn run(self, tx: Sender<SourceEvent>) -> SourceExit {
        poll_every(self.interval, || self.poll(&tx)).await
    }
}

/// Settings of the dcgm-exporter scraper.
#[derive(Clone, Debug)]
pub struct DcgmExporterSource {
    /// `http://host:port/metrics` of this node's exporter.
    pub url: String,
    /// Time between scrapes.
    pub interval: Duration,
    /// Longest scrape.
    pub timeout: Duration,
}

impl DcgmExporterSource {
    /// Scrape once and send what it shows. `up` is what the last scrape
    /// said: a failure is logged as a warning only when the source goes
    /// down (one line for an exporter that is not there, not one a scrape);
    /// each failed scrape is `Failed` (the exporter was asked for by URL, so
    /// an exporter that does not answer is failing, not absent).
    pub async fn poll(
        &self,
        state: &mut ExporterState,
        up: &mut Option<bool>,
        tx: &Sender<SourceEvent>,
    ) -> Sent {
        let source = "dcgm_exporter";
        match dcgm_exporter::scrape(&self.url, self.timeout).await {
            Ok(text) => {
                if *up != Some(true) {
                    tracing::info!(url = %self.url, "reading DCGM health from dcgm-exporter");
                }
                *up = Some(true);
                tx.send(SourceEvent::Up { source }).await?;
                let (samples, errors) = dcgm_exporter::parse_exposition(&text);
                if errors > 0 {
                    tx.send(SourceEvent::ParseErrors { source, n: errors })
                        .await?;
                }
                send_faults(tx, state.faults(&samples), SystemTime::now()).await?;
            }
            Err(e) => {
                if *up != Some(false) {
                    tracing::warn!(url = %self.url, error = %e, "dcgm-exporter not reachable; retrying every interval");
                } else {
                    tracing::debug!(url = %self.url, error = %e, "dcgm-exporter still not reachable");
                }
                *up = Some(false);
                tx.send(SourceEvent::Failed {
                    source,
                    error: format!("scraping {}: {e}", self.url),
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Scrape every interval until the receiver is gone. An exporter that
    /// is missing may come later (it starts after the agent on a new node),
    /// so the source keeps trying.
    pub async fn run(self, tx: Sender<SourceEvent>) -> SourceExit {
        let mut state = ExporterState::default();
        let mut up = None;
        while self.poll(&mut state, &mut up, &tx).await.is_ok() {
            tokio::time::sleep(self.interval).await;
        }
        SourceExit::ReceiverGone
    }
}

#[cfg(test)]
#[path = "sources_tests.rs"]
mod tests;
