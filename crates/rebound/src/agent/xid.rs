//! Kernel-log incidents ([`KernelFault`]) as agent faults, and the scan of a
//! kernel log (file or stream) into them.
//!
//! Codes: an Xid is source `NvidiaXid`, code `<n>`; "fallen off the bus"
//! without an Xid line is code `79`; an NVSwitch SXid is source `NvidiaXid`,
//! code `<n>` (SXid numbers start at 11000, so ranges never mix) with Event
//! reason `NvSwitchSXid` and device `nvswitch<K>`.

use std::io::BufRead;

use super::fault::{Accelerator, AgentFault, MAX_MESSAGE_CHARS, SOURCE_NVIDIA_XID, bounded_text};
use super::kmsg::{KernelFault, KmsgDecoder, KmsgError, MAX_LINE_BYTES, RecordMeta, split_record};
use super::pci::DeviceMap;

/// The Event reasons of XIDs and SXids, defined with the fault record
/// (which decides from them whether repeats count) and named here too.
pub use super::fault::{REASON_SXID, REASON_XID};

/// The agent fault for one kernel-log incident.
pub fn to_agent_fault(fault: &KernelFault, map: &DeviceMap) -> AgentFault {
    match fault {
        KernelFault::Xid { pci, code, detail } => AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: code.to_string(),
            device: pci.as_ref().map(|p| map.device_name(p)),
            reason: REASON_XID,
            message: bounded_text(
                &match pci {
                    Some(p) => format!("Xid {code} on GPU {p}: {detail}"),
                    None => format!("Xid {code}: {detail}"),
                },
                MAX_MESSAGE_CHARS,
            ),
        },
        KernelFault::SXid {
            switch,
            pci,
            code,
            detail,
        } => AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NVIDIA_XID,
            code: code.to_string(),
            device: Some(match switch {
                Some(k) => format!("nvswitch{k}"),
                None => pci.to_string(),
            }),
            reason: REASON_SXID,
            message: bounded_text(
                &format!("SXid {code} on NVSwitch {pci}: {detail}"),
                MAX_MESSAGE_CHARS,
            ),
        },
    }
}

/// One fault found in the kernel log, with the record header when the line
/// came from `/dev/kmsg` (its boot-relative time dates the fault).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedFault {
    /// The fault.
    pub fault: AgentFault,
    /// `/dev/kmsg` header of the line that completed the incident.
    pub record: Option<RecordMeta>,
}

/// Turns kernel-log lines into faults; counts what it could not parse.
#[derive(Debug, Default)]
pub struct KmsgScanner {
    decoder: KmsgDecoder,
    map: DeviceMap,
    /// Lines with an NVIDIA marker that did not parse.
    pub parse_errors: u64,
    /// Last parse error, for a log line.
    pub last_error: Option<KmsgError>,
    /// Lines read.
    pub lines: u64,
}

impl KmsgScanner {
    /// A scanner that names GPUs by `map`.
    pub fn new(map: DeviceMap) -> Self {
        Self {
            map,
            ..Self::default()
        }
    }

    /// Feed one line (a `/dev/kmsg` record or a dmesg-style line).
    pub fn push(&mut self, line: &str) -> Option<ScannedFault> {
        self.lines += 1;
        let (record, msg) = split_record(line);
        match self.decoder.push(msg) {
            Ok(Some(k)) => Some(ScannedFault {
                fault: to_agent_fault(&k, &self.map),
                record,
            }),
            Ok(None) => None,
            Err(e) => {
                self.parse_errors += 1;
                self.last_error = Some(e);
                None
            }
        }
    }

    /// Scan a whole reader to its end (a file given with `--kmsg-file`).
    pub fn scan<R: BufRead>(&mut self, mut reader: R) -> std::io::Result<Vec<ScannedFault>> {
        let mut out = Vec::new();
        let mut buf = Vec::with_capacity(256);
        while read_bounded_line(&mut reader, &mut buf)? {
            let line = String::from_utf8_lossy(&buf);
            if let Some(f) = self.push(&line) {
                out.push(f);
            }
        }
        Ok(out)
    }
}

/// Read one line into `buf` (newline stripped), keeping at most
/// [`MAX_LINE_BYTES`] and discarding the rest of an overlong line, so a
/// file without newlines cannot grow memory. `false` at end of input.
pub fn read_bounded_line<R: BufRead>(reader: &mut R, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    let mut any = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(any);
        }
        any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_uses_device_index_when_mapped() {
        let map = DeviceMap::parse_flag("0000:9b:00.0=4").expect("map");
        let mut s = KmsgScanner::new(map);
        let f = s
            .push("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout")
            .expect("fault");
        assert_eq!(f.fault.code, "119");
        assert_eq!(f.fault.device.as_deref(), Some("4"));
        assert_eq!(f.fault.reason, REASON_XID);
        assert_eq!(f.record, None);
    }

    #[test]
    fn sxid_names_the_switch() {
        let mut s = KmsgScanner::new(DeviceMap::default());
        let f = s
            .push("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress")
            .expect("fault");
        assert_eq!(
            (
                f.fault.code.as_str(),
                f.fault.device.as_deref(),
                f.fault.reason
            ),
            ("12028", Some("nvswitch3"), REASON_SXID)
        );
    }

    #[test]
    fn kmsg_record_time_is_kept() {
        let mut s = KmsgScanner::new(DeviceMap::default());
        let f = s
            .push("4,1227,437812449,c;NVRM: Xid (PCI:0000:01:00): 43, pid=1814139, name=cuda_assert_64b, Ch 00000018")
            .expect("fault");
        assert_eq!(f.record.map(|r| r.usec), Some(437812449));
        assert_eq!(f.fault.device.as_deref(), Some("0000:01:00.0"));
    }

    #[test]
    fn bounded_reader_drops_the_tail_of_long_lines() {
        let mut data = vec![b'x'; MAX_LINE_BYTES * 3];
        data.extend_from_slice(b"\nshort\r\n\nlast");
        let mut r = std::io::BufReader::with_capacity(64, data.as_slice());
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while read_bounded_line(&mut r, &mut buf).expect("reads") {
            lines.push(buf.clone());
        }
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].len(), MAX_LINE_BYTES);
        assert_eq!(lines[1], b"short");
        assert_eq!(lines[2], b"");
        assert_eq!(lines[3], b"last");
    }

    #[test]
    fn unknown_address_fallen_off_bus_has_no_device() {
        let mut s = KmsgScanner::new(DeviceMap::default());
        let f = s
            .push("NVRM: fallen off the bus and is not responding to commands.")
            .expect("fault");
        assert_eq!(
            (f.fault.code.as_str(), f.fault.device.clone()),
            ("79", None)
        );
    }
}
