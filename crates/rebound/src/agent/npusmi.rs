//! Ascend NPU health from `npu-smi`, for clusters without the Ascend device
//! plugin's `mindx-dl-deviceinfo-<node>` ConfigMaps.
//!
//! `npu-smi info` prints a table with a Health cell per NPU (`OK`, `Warning`,
//! `Alarm`, `Critical`); for an unhealthy chip, `npu-smi info -t health -i N
//! -c C` prints the hex fault codes (`Error Code : A4025021 8C03A000`). Each
//! code is a fault: source `AscendNpu`, code the upper-case hex, device the
//! NPU id (`N-C` for chips other than 0). An unhealthy chip without a code
//! reports code `health-<status>` so it is not lost.

use std::time::Duration;

use super::cmd::{self, CmdError};
use super::fault::{Accelerator, AgentFault, MAX_MESSAGE_CHARS, SOURCE_ASCEND_NPU, bounded_text};
use super::pci::PciAddr;

/// Event reason for an NPU fault.
pub const REASON_NPU: &str = "NpuFault";

/// One chip's row in the `npu-smi info` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpuRow {
    /// NPU id (`-i`).
    pub npu: u32,
    /// Chip id (`-c`), from the second row.
    pub chip: Option<u32>,
    /// Chip name as printed.
    pub name: String,
    /// Health cell: `OK`, `Warning`, `Alarm`, `Critical`, ...
    pub health: String,
    /// Bus id from the second row.
    pub bus_id: Option<PciAddr>,
}

impl NpuRow {
    /// Whether the chip reports anything but `OK`.
    pub fn unhealthy(&self) -> bool {
        !self.health.eq_ignore_ascii_case("ok")
    }

    /// The `device` string: `N`, or `N-C` for chips other than 0.
    pub fn device(&self) -> String {
        device(self.npu, self.chip)
    }
}

fn device(npu: u32, chip: Option<u32>) -> String {
    match chip {
        Some(c) if c != 0 => format!("{npu}-{c}"),
        _ => npu.to_string(),
    }
}

/// Parse the `npu-smi info` table. Lines that are not device rows
/// (borders, headers, process rows, `...`) are skipped.
pub fn parse_info(text: &str) -> Vec<NpuRow> {
    let mut rows: Vec<NpuRow> = Vec::new();
    let mut expect_chip = false;
    for line in text.lines().take(10_000) {
        let line = line.trim();
        if !line.starts_with('|') {
            expect_chip = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 {
            continue;
        }
        let first: Vec<&str> = cells[0].split_whitespace().collect();
        // Second row of a device: `| <chip> | <bus id> | ...`.
        if expect_chip
            && first.len() == 1
            && let (Ok(chip), Ok(bus)) = (first[0].parse::<u32>(), PciAddr::parse(cells[1]))
            && let Some(last) = rows.last_mut()
        {
            last.chip = Some(chip);
            last.bus_id = Some(bus);
            expect_chip = false;
            continue;
        }
        expect_chip = false;
        // First row: `| <npu> <name> | <health> | ...`; health is a word.
        let health = cells[1].split_whitespace().next().unwrap_or("");
        if first.len() >= 2
            && let Ok(npu) = first[0].parse::<u32>()
            && !health.is_empty()
            && health.chars().all(|c| c.is_ascii_alphabetic())
        {
            rows.push(NpuRow {
                npu,
                chip: None,
                name: bounded_text(&first[1..].join(" "), 32),
                health: health.to_string(),
                bus_id: None,
            });
            expect_chip = true;
        }
    }
    rows
}

/// `npu-smi info -t health` output.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HealthDetail {
    /// `Health Status` (`OK`, `Alarm`, ...).
    pub status: String,
    /// Hex fault codes, upper case.
    pub codes: Vec<String>,
    /// `Error Information` lines joined, bounded.
    pub info: String,
}

/// Parse `npu-smi info -t health -i N -c C`.
pub fn parse_health(text: &str) -> HealthDetail {
    let mut d = HealthDetail::default();
    let mut info: Vec<&str> = Vec::new();
    let mut in_info = false;
    for line in text.lines().take(1_000) {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        match key {
            "Health Status" => {
                d.status = bounded_text(value, 32);
                in_info = false;
            }
            "Error Code" => {
                d.codes = value
                    .split_whitespace()
                    .filter(|c| c.len() <= 16 && c.bytes().all(|b| b.is_ascii_hexdigit()))
                    .map(str::to_ascii_uppercase)
                    .take(64)
                    .collect();
                in_info = false;
            }
            "Error Information" => {
                in_info = true;
                if !value.is_empty() {
                    info.push(value);
                }
            }
            "" if in_info => {
                if !value.is_empty() {
                    info.push(value);
                }
            }
            _ => in_info = false,
        }
    }
    d.info = bounded_text(&info.join("; "), MAX_MESSAGE_CHARS);
    d
}

/// The faults of one chip: one per code, or `health-<status>` without codes.
pub fn faults(row: &NpuRow, detail: Option<&HealthDetail>) -> Vec<AgentFault> {
    let status = detail
        .map(|d| d.status.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(&row.health);
    let healthy = status.eq_ignore_ascii_case("ok");
    let codes: Vec<String> = detail.map(|d| d.codes.clone()).unwrap_or_default();
    if healthy && codes.is_empty() {
        return Vec::new();
    }
    let info = detail.map(|d| d.info.as_str()).unwrap_or("");
    let make = |code: String| AgentFault {
        family: Accelerator::Npu,
        source: SOURCE_ASCEND_NPU,
        message: bounded_text(
            &format!("NPU {} health {status}: {code} {info}", row.device()),
            MAX_MESSAGE_CHARS,
        ),
        code,
        device: Some(row.device()),
        reason: REASON_NPU,
    };
    if codes.is_empty() {
        vec![make(format!("health-{}", status.to_ascii_lowercase()))]
    } else {
        codes.into_iter().map(make).collect()
    }
}

/// Run `npu-smi info`, then `-t health` for each unhealthy chip.
pub async fn collect(binary: &str, timeout: Duration) -> Result<Vec<AgentFault>, CmdError> {
    let table = cmd::run(binary, &["info"], timeout).await?;
    let mut out = Vec::new();
    for row in parse_info(&table.stdout)
        .iter()
        .filter(|r| r.unhealthy())
        .take(64)
    {
        let npu = row.npu.to_string();
        let chip = row.chip.unwrap_or(0).to_string();
        let detail = cmd::run(
            binary,
            &["info", "-t", "health", "-i", &npu, "-c", &chip],
            timeout,
        )
        .await
        .ok()
        .map(|o| parse_health(&o.stdout));
        out.extend(faults(row, detail.as_ref()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B                | Critical      | 73.1        37                0    / 0             |
| 0                         | 0000:61:00.0  | 0           920  / 13553      0    / 32768         |
+===========================+===============+====================================================+
| 1     910B                | OK            | 67.0        38                0    / 0             |
| 0                         | 0000:3D:00.0  | 0           2346 / 15567      0    / 32768         |
+===========================+===============+====================================================+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 4242          | python                   | 100                     |
";

    #[test]
    fn table_rows_and_bus_ids() {
        let rows = parse_info(TABLE);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].npu, rows[0].health.as_str(), rows[0].unhealthy()),
            (0, "Critical", true)
        );
        assert_eq!(
            rows[1].bus_id.map(|b| b.to_string()).as_deref(),
            Some("0000:3d:00.0")
        );
        assert!(!rows[1].unhealthy());
    }

    #[test]
    fn health_codes_become_faults() {
        let d = parse_health(
            "\tHealth Status : Alarm\n\tError Code : a4025021 8C03A000\n\tError Information : lost\n\n\t : more\n",
        );
        assert_eq!(d.status, "Alarm");
        assert_eq!(d.codes, ["A4025021", "8C03A000"]);
        assert_eq!(d.info, "lost; more");
        let rows = parse_info(TABLE);
        let f = faults(&rows[0], Some(&d));
        assert_eq!(f.len(), 2);
        assert_eq!(
            (f[0].code.as_str(), f[0].device.as_deref()),
            ("A4025021", Some("0"))
        );
        assert_eq!(f[0].family, Accelerator::Npu);
        let none = faults(&rows[0], None);
        assert_eq!(none[0].code, "health-critical");
        assert!(faults(&rows[1], None).is_empty());
    }

    #[test]
    fn error_code_na_is_not_a_code() {
        let d = parse_health("Health Status : OK\nError Code : NA\n");
        assert!(d.codes.is_empty());
    }
}
