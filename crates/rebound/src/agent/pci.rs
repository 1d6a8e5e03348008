//! PCI addresses as the NVIDIA driver prints them, and the node's mapping
//! from PCI address to device index.
//!
//! The kernel log names a GPU by PCI address in several spellings
//! (`PCI:0000:3b:00`, `0000:3b:00.0`, NVML's `00000000:3B:00.0`); faults are
//! reported by device index when the node tells it, because that is what
//! people and `nvidia-smi -i` use.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// A PCI bus/device/function address, normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddr {
    /// PCI domain (segment); NVML prints 8 hex digits, the kernel 4.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number.
    pub device: u8,
    /// Function number; the driver's Xid lines omit it (then 0).
    pub function: u8,
}

/// A PCI address that could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not a PCI address: {text:?}")]
pub struct BadPciAddr {
    /// The offending text, bounded.
    pub text: String,
}

impl PciAddr {
    /// Parse `[PCI:][domain:]bus:device[.function]` in hex, any case.
    pub fn parse(text: &str) -> Result<Self, BadPciAddr> {
        let bad = || BadPciAddr {
            text: text.chars().take(64).collect(),
        };
        let t = text.trim();
        let t = t.strip_prefix("PCI:").unwrap_or(t);
        let (main, function) = match t.split_once('.') {
            Some((m, f)) => (m, hex_u8(f).ok_or_else(bad)?),
            None => (t, 0),
        };
        let parts: Vec<&str> = main.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, s] => (hex_u32(d).ok_or_else(bad)?, *b, *s),
            [b, s] => (0, *b, *s),
            _ => return Err(bad()),
        };
        Ok(PciAddr {
            domain,
            bus: hex_u8(bus).ok_or_else(bad)?,
            device: hex_u8(device).ok_or_else(bad)?,
            function,
        })
    }
}

fn hex_u32(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

fn hex_u8(s: &str) -> Option<u8> {
    if s.is_empty() || s.len() > 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(s, 16).ok()
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Errors building a [`DeviceMap`].
#[derive(Debug, thiserror::Error)]
pub enum DeviceMapError {
    /// A `--pci-map` entry is not `ADDRESS=INDEX`.
    #[error("PCI map entry {entry:?} is not ADDRESS=INDEX")]
    Entry {
        /// The entry as given.
        entry: String,
    },
    /// The address in an entry is malformed.
    #[error("PCI map entry {entry:?}: {source}")]
    Address {
        /// The entry as given.
        entry: String,
        /// Why the address did not parse.
        source: BadPciAddr,
    },
    /// The driver's proc directory exists but cannot be listed.
    #[error("cannot list {path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// PCI address → device index (as `nvidia-smi -i` counts) for this node.
///
/// Function numbers are ignored when looking up, because Xid lines print
/// `bus:device` only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceMap {
    by_addr: BTreeMap<(u32, u8, u8), u32>,
}

impl DeviceMap {
    /// Parse `0000:3b:00.0=0,0000:5e:00=1` (commas or whitespace between entries).
    pub fn parse_flag(text: &str) -> Result<Self, DeviceMapError> {
        let mut map = DeviceMap::default();
        for entry in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|e| !e.is_empty())
        {
            let (addr, idx) = entry.split_once('=').ok_or_else(|| DeviceMapError::Entry {
                entry: entry.to_string(),
            })?;
            let addr = PciAddr::parse(addr).map_err(|source| DeviceMapError::Address {
                entry: entry.to_string(),
                source,
            })?;
            let idx: u32 = idx.trim().parse().map_err(|_| DeviceMapError::Entry {
                entry: entry.to_string(),
            })?;
            map.insert(addr, idx);
        }
        Ok(map)
    }

    /// Read the driver's `/proc/driver/nvidia/gpus/<address>/` directories;
    /// index = position in PCI-address order, which is how `nvidia-smi` and
    /// NVML number GPUs. A missing directory (no driver) is an empty map.
    pub fn from_proc_dir(dir: &Path) -> Result<Self, DeviceMapError> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(DeviceMapError::Io {
                    path: dir.display().to_string(),
                    source,
                });
            }
        };
        let mut addrs: Vec<PciAddr> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| PciAddr::parse(&e.file_name().to_string_lossy()).ok())
            .collect();
        addrs.sort();
        addrs.dedup();
        let mut map = DeviceMap::default();
        for (i, a) in addrs.into_iter().enumerate() {
            map.insert(a, u32::try_from(i).unwrap_or(u32::MAX));
        }
        Ok(map)
    }

    /// Add one mapping (later entries win).
    pub fn insert(&mut self, addr: PciAddr, index: u32) {
        self.by_addr
            .insert((addr.domain, addr.bus, addr.device), index);
    }

    /// The device index for an address, if the node told us.
    pub fn index(&self, addr: &PciAddr) -> Option<u32> {
        self.by_addr
            .get(&(addr.domain, addr.bus, addr.device))
            .copied()
    }

    /// The `device` string reported for a GPU: its index, else its address.
    pub fn device_name(&self, addr: &PciAddr) -> String {
        match self.index(addr) {
            Some(i) => i.to_string(),
            None => addr.to_string(),
        }
    }

    /// How many devices are mapped.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// Whether no device is mapped.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_driver_spelling() {
        let want = PciAddr {
            domain: 0,
            bus: 0x3b,
            device: 0,
            function: 0,
        };
        for s in [
            "PCI:0000:3b:00",
            "0000:3b:00",
            "0000:3b:00.0",
            "00000000:3B:00.0",
            "3b:00.0",
        ] {
            assert_eq!(PciAddr::parse(s), Ok(want), "{s}");
        }
        assert_eq!(PciAddr::parse("0009:01:00").map(|a| a.domain), Ok(9));
        assert_eq!(want.to_string(), "0000:3b:00.0");
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "PCI:",
            "zz:00",
            "0000:3b",
            "0000:3b:00.",
            "1:2:3:4",
            "0000:100:00",
        ] {
            assert!(PciAddr::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn flag_map_ignores_function() {
        let m = DeviceMap::parse_flag("0000:3b:00.0=0, 0000:5e:00=1").expect("parses");
        let a = PciAddr::parse("PCI:0000:5e:00").expect("addr");
        assert_eq!(m.index(&a), Some(1));
        assert_eq!(
            m.device_name(&PciAddr::parse("0000:99:00").expect("addr")),
            "0000:99:00.0"
        );
        assert!(DeviceMap::parse_flag("0000:3b:00.0").is_err());
        assert!(DeviceMap::parse_flag("nope=1").is_err());
    }

    #[test]
    fn proc_dir_orders_by_address() {
        let dir = std::env::temp_dir().join(format!("rebound-agent-pci-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["0000:9b:00.0", "0000:1b:00.0", "not-a-gpu"] {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        let m = DeviceMap::from_proc_dir(&dir).expect("reads");
        assert_eq!(m.len(), 2);
        assert_eq!(m.index(&PciAddr::parse("0000:1b:00").expect("a")), Some(0));
        assert_eq!(m.index(&PciAddr::parse("0000:9b:00").expect("a")), Some(1));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            DeviceMap::from_proc_dir(&dir)
                .expect("missing is empty")
                .is_empty()
        );
    }
}
