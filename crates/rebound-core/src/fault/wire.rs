//! The wire contract between fault reporters (rebound's agent, AlertManager
//! hooks, custom checkers) and the controller: the structured Event
//! annotation and the Node condition message format.
//!
//! Both sides use this one module so that a change of format cannot make the
//! agent and the controller disagree silently.

use serde::{Deserialize, Serialize};

/// The largest repeat count any reader keeps (`n=`, the annotation's
/// `count`, an Event's `count` or `series.count`); larger ones are read as
/// this. A count only feeds escalations (`times` within a window) and CEL's
/// `fault.count`, and no sane threshold comes near a million, while a
/// tenant or a broken reporter can write up to `u64::MAX`: clamped at the
/// parse, the number is harmless wherever it travels.
pub const MAX_COUNT: u32 = 1_000_000;

/// `n` clamped to `1..=MAX_COUNT` (a count of 0 is one sighting: the
/// carrier exists).
pub fn clamp_count(n: u64) -> u32 {
    u32::try_from(n.clamp(1, u64::from(MAX_COUNT))).unwrap_or(MAX_COUNT)
}

/// Event annotation carrying one structured fault as JSON ([`WireFault`]).
pub const FAULT_ANNOTATION: &str = "rebound.dev/fault";
/// kcover's Event annotation (`"true"`): kept so kcover users migrate unchanged.
pub const KCOVER_NEED_RECOVERY: &str = "kcover.io/need-recovery";
/// kcover's opt-in label on a job or pod: kept so kcover users migrate unchanged.
pub const KCOVER_OPT_IN: &str = "kcover.io/cascading-recovery";
/// Node condition type the agent sets for GPU faults (`True` = faulty).
pub const GPU_CONDITION: &str = "GpuFault";
/// Node condition type the agent sets for NPU faults (`True` = faulty).
pub const NPU_CONDITION: &str = "NpuFault";

/// One fault as reporters write it and the controller reads it.
///
/// `source` is a [`crate::fault::FaultSource`] name (`NvidiaXid`,
/// `AscendNpu`, ...); it is kept as a string here so that an unknown source
/// from a newer reporter is reported, not a parse failure of the whole batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WireFault {
    pub source: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the reporter first saw this fault (RFC 3339, UTC, milliseconds):
    /// with node, source, code and device it names the occurrence, so that
    /// the controller counts it once however often the condition or Event
    /// carrying it is rewritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// How many times the reporter saw it since `at` (folded repeats): each
    /// is an occurrence of its own, counted once. Readers clamp it to
    /// [`MAX_COUNT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// When the reporter last saw it (RFC 3339, UTC, milliseconds), with
    /// a count above 1: when its newest repeat happened. A repeat's own
    /// time, the same for every reader, so that a controller that reads
    /// the line late (a watch behind, a new leader, a restart) does not
    /// date the repeat at its own first sight, which would make it concern
    /// pods created after it happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// The pods holding `device` when the reporter saw the fault
    /// (`namespace/name`), where only the node knows (the kubelet's
    /// PodResources API under device plugins): a trusted reporter's list
    /// scopes the fault to those pods' jobs (docs/devices.md). At most
    /// [`MAX_PODS`] are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<String>>,
}

/// The most pods a fault line names ([`WireFault::pods`]); more are not read.
pub const MAX_PODS: usize = 64;

/// `pods` as readers keep it: names of the form `namespace/name`, at most
/// [`MAX_PODS`], others dropped.
pub fn clean_pods(pods: Vec<String>) -> Vec<String> {
    pods.into_iter()
        .filter(|p| {
            p.split_once('/')
                .is_some_and(|(ns, n)| !ns.is_empty() && !n.is_empty() && !n.contains('/'))
        })
        .take(MAX_PODS)
        .collect()
}

impl WireFault {
    /// `at`, parsed.
    pub fn at_time(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.at
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    }

    /// `last`, parsed.
    pub fn last_time(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.last
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    }
}

/// The `at` of a fault first seen at `t` (millisecond precision: the
/// occurrence id must be the same however many times it is written).
pub fn format_at(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Errors reading a fault from the wire.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("annotation {FAULT_ANNOTATION} is not a valid fault: {0}")]
    Json(#[from] serde_json::Error),
    #[error("condition message line {line:?} has no `code=`")]
    NoCode { line: String },
}

/// Parse the `rebound.dev/fault` annotation value.
///
/// The count is clamped to [`MAX_COUNT`] here, before anything trusts it.
pub fn parse_annotation(value: &str) -> Result<WireFault, WireError> {
    let mut f: WireFault = serde_json::from_str(value)?;
    f.count = f.count.map(|n| u64::from(clamp_count(n)));
    Ok(f)
}

/// Render the `rebound.dev/fault` annotation value.
pub fn format_annotation(fault: &WireFault) -> String {
    // A struct of strings always serialises.
    serde_json::to_string(fault).unwrap_or_default()
}

/// Render a Node condition message: one line per fault,
/// `source=S code=C [device=D] [at=T] [n=N] [last=T] [pods=NS/P,...] | free text`, readable in
/// `kubectl describe`.
pub fn format_condition_message(faults: &[WireFault]) -> String {
    let mut out = String::new();
    for (i, f) in faults.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str("source=");
        out.push_str(&token(&f.source));
        out.push_str(" code=");
        out.push_str(&token(&f.code));
        if let Some(d) = &f.device {
            out.push_str(" device=");
            out.push_str(&token(d));
        }
        if let Some(t) = &f.at {
            out.push_str(" at=");
            out.push_str(&token(t));
        }
        if let Some(n) = f.count {
            out.push_str(&format!(" n={n}"));
        }
        if let Some(t) = &f.last {
            out.push_str(" last=");
            out.push_str(&token(t));
        }
        if let Some(p) = f.pods.as_ref().filter(|p| !p.is_empty()) {
            out.push_str(" pods=");
            out.push_str(&token(&p.join(",")));
        }
        if let Some(m) = &f.message {
            out.push_str(" | ");
            out.push_str(&m.replace('\n', " "));
        }
    }
    out
}

/// Parse a Node condition message written by [`format_condition_message`].
///
/// Lines that do not follow the format (for example a condition written by
/// node-problem-detector) yield an error for that line only.
pub fn parse_condition_message(message: &str) -> Vec<Result<WireFault, WireError>> {
    message
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse_condition_line)
        .collect()
}

fn parse_condition_line(line: &str) -> Result<WireFault, WireError> {
    let (head, text) = match line.split_once(" | ") {
        Some((h, t)) => (h, Some(t.trim().to_string())),
        None => (line, None),
    };
    let mut f = WireFault {
        message: text,
        ..WireFault::default()
    };
    for tok in head.split_whitespace() {
        if let Some((k, v)) = tok.split_once('=') {
            match k {
                "source" => f.source = v.to_string(),
                "code" => f.code = v.to_string(),
                "device" => f.device = Some(v.to_string()),
                "node" => f.node = Some(v.to_string()),
                "at" => f.at = Some(v.to_string()),
                "last" => f.last = Some(v.to_string()),
                "pods" => {
                    f.pods = Some(clean_pods(v.split(',').map(str::to_string).collect()));
                }
                // Clamped at the parse: the agent restores its counts from
                // these lines, and the controller names occurrences by them.
                "n" => f.count = v.parse::<u64>().ok().map(|n| u64::from(clamp_count(n))),
                _ => {}
            }
        }
    }
    if f.code.is_empty() {
        return Err(WireError::NoCode {
            line: line.to_string(),
        });
    }
    Ok(f)
}

fn token(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_whitespace() || c == '|' {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pods_holding_a_device_round_trip_bounded() {
        let f = WireFault {
            source: "NvidiaXid".into(),
            code: "13".into(),
            device: Some("3".into()),
            pods: Some(vec!["team-a/llm-0".into(), "team-b/x-1".into()]),
            ..Default::default()
        };
        let msg = format_condition_message(std::slice::from_ref(&f));
        assert!(msg.contains(" pods=team-a/llm-0,team-b/x-1"), "{msg}");
        let back = parse_condition_message(&msg).remove(0).expect("parses");
        assert_eq!(back, f);
        let many: Vec<String> = (0..100).map(|i| format!("ns/p{i}")).collect();
        let line = format!(
            "source=NvidiaXid code=13 pods={},bad,/x,a/b/c",
            many.join(",")
        );
        let back = parse_condition_message(&line).remove(0).expect("parses");
        assert_eq!(back.pods.as_ref().map(Vec::len), Some(MAX_PODS));
    }

    #[test]
    fn condition_message_round_trips() {
        let faults = vec![
            WireFault {
                source: "NvidiaXid".into(),
                code: "79".into(),
                device: Some("3".into()),
                message: Some("GPU has fallen off the bus".into()),
                ..Default::default()
            },
            WireFault {
                source: "DcgmDiag".into(),
                code: "memory bandwidth".into(),
                ..Default::default()
            },
        ];
        let msg = format_condition_message(&faults);
        let back: Vec<_> = parse_condition_message(&msg)
            .into_iter()
            .map(|r| r.expect("parses"))
            .collect();
        assert_eq!(back[0], faults[0]);
        assert_eq!(back[1].code, "memory_bandwidth");
    }

    #[test]
    fn occurrence_fields_round_trip_in_lines_and_annotations() {
        let t: chrono::DateTime<chrono::Utc> = "2026-12-01T10:00:00.123Z".parse().unwrap();
        let f = WireFault {
            source: "NvidiaXid".into(),
            code: "13".into(),
            device: Some("0".into()),
            at: Some(format_at(t)),
            count: Some(2),
            message: Some("graphics engine exception".into()),
            ..Default::default()
        };
        let line = format_condition_message(std::slice::from_ref(&f));
        assert!(
            line.contains(" at=2026-12-01T10:00:00.123Z n=2 | "),
            "{line}"
        );
        let back = parse_condition_message(&line).remove(0).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.at_time(), Some(t));
        let ann = parse_annotation(&format_annotation(&f)).unwrap();
        assert_eq!(ann, f);
        // A line without them (an older agent, a person) still parses.
        let old = parse_condition_message("source=NvidiaXid code=79 device=3")
            .remove(0)
            .unwrap();
        assert_eq!((old.at, old.count), (None, None));
    }

    #[test]
    fn counts_are_clamped_where_they_are_read() {
        let line = format!("source=NvidiaXid code=13 n={}", u64::MAX);
        let f = parse_condition_message(&line).remove(0).unwrap();
        assert_eq!(f.count, Some(u64::from(MAX_COUNT)));
        let f = parse_condition_message("source=NvidiaXid code=13 n=0")
            .remove(0)
            .unwrap();
        assert_eq!(f.count, Some(1));
        let ann = format!(
            r#"{{"source":"NvidiaXid","code":"13","count":{}}}"#,
            u64::MAX
        );
        assert_eq!(
            parse_annotation(&ann).unwrap().count,
            Some(u64::from(MAX_COUNT))
        );
        assert_eq!(clamp_count(7), 7);
    }

    #[test]
    fn foreign_condition_line_is_an_error_not_a_panic() {
        let r = parse_condition_message("kernel has deadlocked");
        assert!(matches!(r[0], Err(WireError::NoCode { .. })));
    }

    #[test]
    fn annotation_rejects_unknown_fields() {
        assert!(parse_annotation(r#"{"source":"NvidiaXid","code":"79","bogus":1}"#).is_err());
        let f = parse_annotation(r#"{"source":"NvidiaXid","code":"79","node":"gpu-7"}"#).unwrap();
        assert_eq!(f.node.as_deref(), Some("gpu-7"));
    }
}
