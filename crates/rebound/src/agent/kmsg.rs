//! Kernel-log parsing: NVIDIA `NVRM: Xid` lines, NVSwitch `SXid` lines and
//! "fallen off the bus" records, in every prefix format the kernel log is
//! read in (`/dev/kmsg` records, `dmesg`, `dmesg --ctime`, `dmesg --decode
//! --time-format iso`, journal, pstore).
//!
//! Markers are searched inside the line rather than after a parsed prefix,
//! so an unknown prefix still parses. A line without `NVRM` or `SXid` costs
//! two substring scans and nothing else. No regex, no panics: every index is
//! from `find`/`split_once` on the same string.

use std::collections::VecDeque;

use super::pci::{BadPciAddr, PciAddr};

/// Longest line considered; the rest is cut (a kernel record is at most
/// ~1 KiB, so this only bounds hostile or corrupt input).
pub const MAX_LINE_BYTES: usize = 4096;
/// Longest detail text kept from a line.
const MAX_DETAIL_CHARS: usize = 200;
/// How many lines back a continuation may refer to its first line.
const CONTINUATION_WINDOW: u64 = 16;
/// Recent faults remembered for de-duplicating one incident's lines.
const RECENT_CAP: usize = 32;

/// A line that carries an NVIDIA marker but not in a shape we understand.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KmsgError {
    /// `Xid (`/`SXid (` without a closing `): `.
    #[error("{marker} line without `): `: {line:?}")]
    Shape {
        /// `Xid` or `SXid`.
        marker: &'static str,
        /// The line, bounded.
        line: String,
    },
    /// The address inside the parentheses is malformed.
    #[error("{marker} line: {source}")]
    Pci {
        /// `Xid` or `SXid`.
        marker: &'static str,
        /// Why.
        source: BadPciAddr,
    },
    /// The code after the address is not a number.
    #[error("{marker} line with a non-numeric code: {line:?}")]
    Code {
        /// `Xid` or `SXid`.
        marker: &'static str,
        /// The line, bounded.
        line: String,
    },
}

/// What one kernel-log line says, before lines are joined into incidents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KmsgLine {
    /// `NVRM: Xid (PCI:dddd:bb:dd): N, ...`.
    Xid {
        /// The GPU.
        pci: PciAddr,
        /// The XID number.
        code: u32,
        /// Text after the code, bounded.
        detail: String,
    },
    /// `nvidia-nvswitchK: SXid (PCI:dddd:bb:dd.f): N, ...`.
    SXid {
        /// `K` of `nvidia-nvswitchK`, when printed.
        switch: Option<u32>,
        /// The NVSwitch.
        pci: PciAddr,
        /// The SXid number.
        code: u32,
        /// Text after the code, bounded.
        detail: String,
        /// A `Severity ...` or `Data {...}` line: detail of an SXid printed
        /// just before, not a fault of its own.
        continuation: bool,
    },
    /// A "fallen off the bus" line without an Xid: the single-line form
    /// (with an address) or the last line of the 3-line form (without).
    FallenOffBus {
        /// The GPU, when the line names it.
        pci: Option<PciAddr>,
    },
    /// `NVRM: The NVIDIA GPU <addr>`: first line of a multi-line record
    /// (fallen off the bus, or other messages); only meaningful with its end.
    GpuIntro {
        /// The GPU.
        pci: PciAddr,
    },
}

/// `/dev/kmsg` record header fields (`prio,seq,usec,flags;`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// Syslog priority and facility.
    pub prio: u32,
    /// Sequence number; gaps mean lost records.
    pub seq: u64,
    /// Microseconds since boot (monotonic clock).
    pub usec: u64,
}

/// Split a `/dev/kmsg` record into its header and message; other lines
/// have no header and are returned whole.
pub fn split_record(line: &str) -> (Option<RecordMeta>, &str) {
    let Some((head, msg)) = line.split_once(';') else {
        return (None, line);
    };
    if head.len() > 64 || !head.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        return (None, line);
    }
    let mut fields = head.split(',');
    let prio = fields.next().and_then(|f| f.parse().ok());
    let seq = fields.next().and_then(|f| f.parse().ok());
    let usec = fields.next().and_then(|f| f.parse().ok());
    match (prio, seq, usec) {
        (Some(prio), Some(seq), Some(usec)) => (Some(RecordMeta { prio, seq, usec }), msg),
        _ => (None, line),
    }
}

/// Cut a line to [`MAX_LINE_BYTES`] on a char boundary.
pub fn bound_line(line: &str) -> &str {
    if line.len() <= MAX_LINE_BYTES {
        return line;
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Parse one line. `Ok(None)` for every line that is not an NVIDIA fault
/// line (almost all of them); `Err` for a line with a fault marker that does
/// not parse, so it can be counted.
pub fn parse_line(line: &str) -> Result<Option<KmsgLine>, KmsgError> {
    let line = bound_line(line);
    // The cheap filter: everything we parse contains one of these.
    let has_nvrm = line.contains("NVRM");
    if !has_nvrm && !line.contains("SXid") {
        return Ok(None);
    }
    if let Some(i) = line.find("NVRM: Xid") {
        return parse_coded(&line[i + "NVRM: Xid".len()..], "Xid", line)
            .map(|(pci, code, detail)| Some(KmsgLine::Xid { pci, code, detail }));
    }
    if let Some(i) = line.find("SXid (") {
        let (pci, code, detail) = parse_coded(&line[i + "SXid".len()..], "SXid", line)?;
        let switch = switch_number(&line[..i]);
        let continuation = detail.starts_with("Severity ") || detail.starts_with("Data {");
        return Ok(Some(KmsgLine::SXid {
            switch,
            pci,
            code,
            detail,
            continuation,
        }));
    }
    if !has_nvrm {
        return Ok(None);
    }
    if let Some(i) = line.find("NVRM: The NVIDIA GPU ") {
        let rest = &line[i + "NVRM: The NVIDIA GPU ".len()..];
        let token = rest.split_whitespace().next().unwrap_or("");
        let Ok(pci) = PciAddr::parse(token) else {
            return Ok(None);
        };
        if line.contains("fallen off the bus") {
            return Ok(Some(KmsgLine::FallenOffBus { pci: Some(pci) }));
        }
        return Ok(Some(KmsgLine::GpuIntro { pci }));
    }
    if !line.contains("fallen off the bus") {
        return Ok(None);
    }
    // `NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.`
    if let Some(i) = line.find("NVRM: GPU ") {
        let rest = &line[i + "NVRM: GPU ".len()..];
        if let Some((addr, _)) = rest.split_once(": ")
            && let Ok(pci) = PciAddr::parse(addr)
        {
            return Ok(Some(KmsgLine::FallenOffBus { pci: Some(pci) }));
        }
    }
    // `NVRM: fallen off the bus and is not responding to commands.`
    Ok(Some(KmsgLine::FallenOffBus { pci: None }))
}

/// `rest` starts after `Xid`/`SXid`: ` (PCI:0000:9b:00): 119, detail`.
fn parse_coded(
    rest: &str,
    marker: &'static str,
    line: &str,
) -> Result<(PciAddr, u32, String), KmsgError> {
    let shape = || KmsgError::Shape {
        marker,
        line: super::fault::bounded_text(line, MAX_DETAIL_CHARS),
    };
    let rest = rest.trim_start().strip_prefix('(').ok_or_else(shape)?;
    let (addr, after) = rest.split_once("): ").ok_or_else(shape)?;
    let pci = PciAddr::parse(addr).map_err(|source| KmsgError::Pci { marker, source })?;
    let after = after.trim_start();
    let digits_end = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    let code: u32 = after[..digits_end].parse().map_err(|_| KmsgError::Code {
        marker,
        line: super::fault::bounded_text(line, MAX_DETAIL_CHARS),
    })?;
    let detail = after[digits_end..].trim_start_matches([',', ' ']);
    Ok((
        pci,
        code,
        super::fault::bounded_text(detail, MAX_DETAIL_CHARS),
    ))
}

/// `K` from a `nvidia-nvswitchK: ` just before the SXid marker.
fn switch_number(before: &str) -> Option<u32> {
    let i = before.rfind("nvidia-nvswitch")?;
    let digits: String = before[i + "nvidia-nvswitch".len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// One NVIDIA fault incident from the kernel log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelFault {
    /// An Xid; "fallen off the bus" without an Xid line is reported as Xid 79
    /// (which is what Xid 79 means).
    Xid {
        /// The GPU, when known.
        pci: Option<PciAddr>,
        /// XID number.
        code: u32,
        /// Text after the code, bounded.
        detail: String,
    },
    /// An NVSwitch SXid.
    SXid {
        /// `K` of `nvidia-nvswitchK`.
        switch: Option<u32>,
        /// The switch.
        pci: PciAddr,
        /// SXid number.
        code: u32,
        /// Text after the code, bounded.
        detail: String,
    },
}

/// The XID that "fallen off the bus" is.
pub const XID_FALLEN_OFF_BUS: u32 = 79;

/// Joins lines into incidents with bounded state: multi-line
/// fallen-off-the-bus records, an Xid 79 followed by its "GPU has fallen off
/// the bus" line, and SXid `Severity`/`Data` detail lines.
#[derive(Debug, Default)]
pub struct KmsgDecoder {
    line_no: u64,
    intro: Option<(PciAddr, u64)>,
    recent: VecDeque<(bool, Option<PciAddr>, u32, u64)>,
}

impl KmsgDecoder {
    /// A decoder with no history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed one line; returns the incident it completes, if any.
    pub fn push(&mut self, line: &str) -> Result<Option<KernelFault>, KmsgError> {
        self.line_no = self.line_no.saturating_add(1);
        let parsed = parse_line(line)?;
        let Some(parsed) = parsed else {
            return Ok(None);
        };
        Ok(match parsed {
            KmsgLine::Xid { pci, code, detail } => {
                if code == XID_FALLEN_OFF_BUS && self.seen(false, Some(pci), code) {
                    None
                } else {
                    self.remember(false, Some(pci), code);
                    Some(KernelFault::Xid {
                        pci: Some(pci),
                        code,
                        detail,
                    })
                }
            }
            KmsgLine::SXid {
                switch,
                pci,
                code,
                detail,
                continuation,
            } => {
                if continuation && self.seen(true, Some(pci), code) {
                    None
                } else {
                    self.remember(true, Some(pci), code);
                    Some(KernelFault::SXid {
                        switch,
                        pci,
                        code,
                        detail,
                    })
                }
            }
            KmsgLine::GpuIntro { pci } => {
                self.intro = Some((pci, self.line_no));
                None
            }
            KmsgLine::FallenOffBus { pci } => {
                let pci = pci.or_else(|| {
                    self.intro
                        .take()
                        .filter(|(_, at)| self.line_no - at <= 3)
                        .map(|(p, _)| p)
                });
                if pci.is_some() && self.seen(false, pci, XID_FALLEN_OFF_BUS) {
                    None
                } else {
                    self.remember(false, pci, XID_FALLEN_OFF_BUS);
                    Some(KernelFault::Xid {
                        pci,
                        code: XID_FALLEN_OFF_BUS,
                        detail: "GPU has fallen off the bus".to_string(),
                    })
                }
            }
        })
    }

    fn seen(&self, sxid: bool, pci: Option<PciAddr>, code: u32) -> bool {
        self.recent.iter().any(|&(s, p, c, at)| {
            s == sxid && p == pci && c == code && self.line_no - at <= CONTINUATION_WINDOW
        })
    }

    fn remember(&mut self, sxid: bool, pci: Option<PciAddr>, code: u32) {
        if self.recent.len() >= RECENT_CAP {
            self.recent.pop_front();
        }
        self.recent.push_back((sxid, pci, code, self.line_no));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pci(s: &str) -> PciAddr {
        PciAddr::parse(s).expect("test address")
    }

    #[test]
    fn xid_in_every_prefix_format() {
        let lines = [
            "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
            "[  123.456789] NVRM: Xid (PCI:0000:3b:00): 48, DBE",
            "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:3b:00): 48, DBE",
            "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:3b:00): 48, DBE",
            "Dec  2 10:43:35 worker4 kernel: [240314.528856] NVRM: Xid (PCI:0000:3b:00): 48, DBE",
            "4,1227,437812449,c;NVRM: Xid (PCI:0000:3b:00.0): 48, DBE",
            "<4>[ 1126.635824] NVRM: Xid (0000:3b:00): 48",
        ];
        for l in lines {
            match parse_line(l) {
                Ok(Some(KmsgLine::Xid { pci: p, code, .. })) => {
                    assert_eq!((p, code), (pci("0000:3b:00"), 48), "{l}");
                }
                other => panic!("{l}: {other:?}"),
            }
        }
    }

    #[test]
    fn record_header_is_split() {
        let (meta, msg) = split_record("6,3964,206764307,-;nvidia-nvswitch2: open (major=510)");
        assert_eq!(
            meta,
            Some(RecordMeta {
                prio: 6,
                seq: 3964,
                usec: 206764307
            })
        );
        assert_eq!(msg, "nvidia-nvswitch2: open (major=510)");
        assert_eq!(split_record("a;b").0, None);
        assert_eq!(split_record("4,1,2,c,1,-;x").0.map(|m| m.usec), Some(2));
    }

    #[test]
    fn malformed_marker_lines_are_errors_not_panics() {
        assert!(matches!(
            parse_line("NVRM: Xid (PCI:0000:3b:00"),
            Err(KmsgError::Shape { .. })
        ));
        assert!(matches!(
            parse_line("NVRM: Xid (PCI:zz): 1"),
            Err(KmsgError::Pci { .. })
        ));
        assert!(matches!(
            parse_line("NVRM: Xid (PCI:0000:3b:00): x"),
            Err(KmsgError::Code { .. })
        ));
        assert!(matches!(
            parse_line("NVRM: Xid (PCI:0000:3b:00): 99999999999"),
            Err(KmsgError::Code { .. })
        ));
        assert_eq!(parse_line("just text"), Ok(None));
        assert_eq!(
            parse_line("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad"),
            Ok(None)
        );
    }

    #[test]
    fn long_lines_are_bounded() {
        let long = format!("NVRM: Xid (PCI:0000:3b:00): 13, {}", "é".repeat(10_000));
        match parse_line(&long) {
            Ok(Some(KmsgLine::Xid { detail, .. })) => assert!(detail.chars().count() <= 201),
            other => panic!("{other:?}"),
        }
        assert!(bound_line(&long).len() <= MAX_LINE_BYTES);
    }

    #[test]
    fn multiline_fallen_off_bus_is_one_xid_79() {
        let mut d = KmsgDecoder::new();
        let out: Vec<_> = [
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "               NVRM: fallen off the bus and is not responding to commands.",
        ]
        .iter()
        .filter_map(|l| d.push(l).expect("parses"))
        .collect();
        assert_eq!(
            out,
            vec![KernelFault::Xid {
                pci: Some(pci("0000:b3:00.0")),
                code: 79,
                detail: "GPU has fallen off the bus".into()
            }]
        );
    }

    #[test]
    fn xid_79_and_its_bus_line_are_one_incident() {
        let mut d = KmsgDecoder::new();
        let a = d
            .push("NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
            .expect("parses");
        let b = d
            .push("NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.")
            .expect("parses");
        assert!(matches!(a, Some(KernelFault::Xid { code: 79, .. })));
        assert_eq!(b, None);
    }

    #[test]
    fn sxid_detail_lines_follow_their_sxid() {
        let mut d = KmsgDecoder::new();
        let a = d
            .push("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63 LTSSM Fault Up")
            .expect("parses");
        let b = d
            .push("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000}")
            .expect("parses");
        assert!(matches!(
            a,
            Some(KernelFault::SXid {
                switch: Some(0),
                code: 20034,
                ..
            })
        ));
        assert_eq!(b, None);
        // A detail line with no SXid before it still reports the fault.
        let c = d
            .push("nvidia-nvswitch2: SXid (PCI:0000:c3:00.0): 12033, Severity 1 Engine instance 00")
            .expect("parses");
        assert!(matches!(
            c,
            Some(KernelFault::SXid {
                switch: Some(2),
                code: 12033,
                ..
            })
        ));
    }
}
