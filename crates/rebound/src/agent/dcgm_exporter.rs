//! DCGM health from the node's dcgm-exporter (`/metrics`, Prometheus text),
//! for clusters that run the NVIDIA GPU Operator: its DCGM hostengine
//! already watches the GPUs and its exporter publishes the fields, so the
//! agent needs neither `dcgmi` in its image nor `libdcgm`.
//!
//! Fields read (names as in NVIDIA/dcgm-exporter `etc/default-counters.csv`
//! @00d6d344ea4a39112b211b9ff5af3d97e0bb51c2; the label `gpu` is the GPU
//! index):
//!
//! | field | default in the exporter | fault |
//! |---|---|---|
//! | `DCGM_FI_DEV_XID_ERRORS` (gauge, the last XID) | on | `NvidiaXid`/`<xid>` when the value changes to a non-zero one |
//! | `DCGM_FI_DEV_ROW_REMAP_FAILURE` (gauge) | on | `NodeCondition`/`nvml-row-remap-failure` while non-zero |
//! | `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` (counter) | commented out | `NodeCondition`/`nvml-ecc-uncorrected` while non-zero |
//! | `DCGM_FI_DEV_RETIRED_PENDING` (counter) | commented out | `NodeCondition`/`nvml-retired-pages-pending` while non-zero |
//!
//! The codes are the NVML source's (DCGM reads the same driver counters), so
//! a node watched by both folds one incident into one fault. The XID gauge
//! holds the *last* XID for as long as the driver runs: the first reading is
//! only remembered (an old XID is not a new fault), and a later XID equal to
//! the last one is not seen here (the kernel-log source sees it).
//! `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS` counts repairs that worked and
//! is not a fault.

use std::collections::HashMap;
use std::time::Duration;

use super::fault::{Accelerator, AgentFault, SOURCE_NODE_CONDITION, SOURCE_NVIDIA_XID};

/// Event reason for a fault read from dcgm-exporter.
pub const REASON_EXPORTER: &str = "GpuDcgmExporter";
/// The exporter's body is read up to this size (a node with 8 GPUs and
/// every field on is ~200 KiB).
pub const MAX_BODY_BYTES: usize = 4 << 20;

const XID: &str = "DCGM_FI_DEV_XID_ERRORS";
const ROW_REMAP_FAILURE: &str = "DCGM_FI_DEV_ROW_REMAP_FAILURE";
const ECC_DBE_VOL: &str = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL";
const RETIRED_PENDING: &str = "DCGM_FI_DEV_RETIRED_PENDING";
const FIELDS: [&str; 4] = [XID, ROW_REMAP_FAILURE, ECC_DBE_VOL, RETIRED_PENDING];

/// Why a scrape gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// `--dcgm-exporter-url` is not an `http://host:port/path` URL.
    #[error("{url:?} is not an http://HOST:PORT/PATH URL")]
    Url {
        /// The flag's value.
        url: String,
    },
    /// Nothing answers there (no exporter on this node, wrong port).
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// Building the request failed.
    #[error("request: {0}")]
    Request(#[from] hyper::http::Error),
    /// The exporter answered with an error status.
    #[error("HTTP status {0}")]
    Status(u16),
    /// The body was larger than [`MAX_BODY_BYTES`].
    #[error("body larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// One sample of a field this source reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// The `gpu` label (the GPU index), when present.
    pub gpu: Option<String>,
    /// The value.
    pub value: f64,
}

/// The samples of [`FIELDS`] in an exposition, and how many of their lines
/// did not parse. Other metrics are skipped without being parsed further.
pub fn parse_exposition(text: &str) -> (Vec<Sample>, u64) {
    let mut out = Vec::new();
    let mut errors = 0;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let name = &line[..name_end];
        if !FIELDS.contains(&name) {
            continue;
        }
        match parse_sample(&line[name_end..]) {
            Some((gpu, value)) => out.push(Sample {
                name: name.to_string(),
                gpu,
                value,
            }),
            None => errors += 1,
        }
    }
    (out, errors)
}

/// `{labels} value [timestamp]` → the `gpu` label and the value.
fn parse_sample(rest: &str) -> Option<(Option<String>, f64)> {
    let mut gpu = None;
    let mut rest = rest.trim_start();
    if let Some(body) = rest.strip_prefix('{') {
        let (labels, after) = split_labels(body)?;
        gpu = labels.into_iter().find(|(k, _)| k == "gpu").map(|(_, v)| v);
        rest = after;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((gpu, value))
}

/// Label pairs up to the closing `}` (quoted values with `\"`, `\\`, `\n`
/// escapes), and what follows it.
fn split_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start().trim_start_matches(',').trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        let mut chars = rest[eq + 1..].trim_start().char_indices();
        let quoted = &rest[eq + 1..].trim_start();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            match (escaped, c) {
                (true, 'n') => value.push('\n'),
                (true, c) => value.push(c),
                (false, '\\') => {
                    escaped = true;
                    continue;
                }
                (false, '"') => {
                    end = Some(i);
                    break;
                }
                (false, c) => value.push(c),
            }
            escaped = false;
        }
        labels.push((key, value));
        rest = &quoted[end? + 1..];
    }
}

/// What the exporter said last, to tell a new XID from the standing one.
#[derive(Debug, Default)]
pub struct ExporterState {
    last_xid: HashMap<String, u64>,
    primed: bool,
}

impl ExporterState {
    /// The faults one scrape shows. The first scrape only records the XID
    /// gauges (the last XID since the driver loaded may be days old).
    pub fn faults(&mut self, samples: &[Sample]) -> Vec<AgentFault> {
        let mut out: Vec<AgentFault> = Vec::new();
        let mut push = |f: AgentFault| {
            if !out
                .iter()
                .any(|o| o.source == f.source && o.code == f.code && o.device == f.device)
            {
                out.push(f);
            }
        };
        let primed = self.primed;
        for s in samples {
            if !s.value.is_finite() || s.value <= 0.0 {
                if s.name == XID
                    && let Some(gpu) = &s.gpu
                {
                    self.last_xid.insert(gpu.clone(), 0);
                }
                continue;
            }
            let device = s.gpu.clone();
            let gpu = device.as_deref().unwrap_or("?");
            let nc = |code: &str, message: String| AgentFault {
                family: Accelerator::Gpu,
                source: SOURCE_NODE_CONDITION,
                code: code.to_string(),
                device: device.clone(),
                reason: REASON_EXPORTER,
                message,
            };
            match s.name.as_str() {
                XID => {
                    // A gauge value is an XID number; anything else is not one.
                    if s.value.fract() != 0.0 || s.value > f64::from(u32::MAX) {
                        continue;
                    }
                    let xid = s.value as u64;
                    let key = gpu.to_string();
                    let before = self.last_xid.insert(key, xid);
                    if primed && before != Some(xid) {
                        push(AgentFault {
                            family: Accelerator::Gpu,
                            source: SOURCE_NVIDIA_XID,
                            code: xid.to_string(),
                            device: device.clone(),
                            reason: super::xid::REASON_XID,
                            message: format!("dcgm-exporter: Xid {xid} on GPU {gpu}"),
                        });
                    }
                }
                ROW_REMAP_FAILURE => push(nc(
                    "nvml-row-remap-failure",
                    format!("dcgm-exporter: row remapping failed on GPU {gpu}"),
                )),
                ECC_DBE_VOL => push(nc(
                    "nvml-ecc-uncorrected",
                    format!(
                        "dcgm-exporter: {} uncorrected (double-bit) ECC errors since driver load on GPU {gpu}",
                        s.value
                    ),
                )),
                RETIRED_PENDING => push(nc(
                    "nvml-retired-pages-pending",
                    format!(
                        "dcgm-exporter: {} pages pending retirement on GPU {gpu} (reset needed)",
                        s.value
                    ),
                )),
                _ => {}
            }
        }
        self.primed = true;
        out
    }
}

/// `GET url` and the body, bounded in size and time.
pub async fn scrape(url: &str, timeout: Duration) -> Result<String, ExporterError> {
    match tokio::time::timeout(timeout, scrape_inner(url)).await {
        Ok(r) => r,
        Err(_) => Err(ExporterError::Timeout(timeout)),
    }
}

async fn scrape_inner(url: &str) -> Result<String, ExporterError> {
    use http_body_util::BodyExt as _;
    let bad = || ExporterError::Url {
        url: url.to_string(),
    };
    let uri: hyper::Uri = url.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("http") {
        return Err(bad());
    }
    let host = uri.host().ok_or_else(bad)?;
    let addr = format!("{host}:{}", uri.port_u16().unwrap_or(80));
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|source| ExporterError::Connect {
            addr: addr.clone(),
            source,
        })?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.as_str())
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())?;
    let resp = send.send_request(req).await?;
    if !resp.status().is_success() {
        return Err(ExporterError::Status(resp.status().as_u16()));
    }
    let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|e| match e.downcast::<hyper::Error>() {
            Ok(h) => ExporterError::Http(*h),
            Err(_) => ExporterError::TooLarge,
        })?
        .to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
#[path = "dcgm_exporter_tests.rs"]
mod tests;
