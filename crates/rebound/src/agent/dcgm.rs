//! DCGM diagnostics: run `dcgmi diag -r <level> -j` (and `dcgmi health -c -j`)
//! and turn failed tests into faults per GPU.
//!
//! Every recorded JSON format is read: the legacy level-1 output (no GPU ids,
//! mixed-case statuses), the 1.7/3.x per-GPU output (`gpu_ids` as a list
//! string or a number, `null` entries between tests) and the 4.x output
//! (`"DCGM Diagnostic"`, `entity_group`/`entity_id`). A failed test is source
//! `NodeCondition`, code `dcgm-<test>` (lower case, non-alphanumerics as
//! `_`); `Warn` and `Skip` are not faults.

use std::time::Duration;

use serde_json::Value;

use super::cmd::{self, CmdError};
use super::fault::{
    Accelerator, AgentFault, MAX_MESSAGE_CHARS, SOURCE_NODE_CONDITION, bounded_text,
};

/// Event reason for a failed DCGM diagnostic test.
pub const REASON_DIAG: &str = "DcgmDiagFailed";
/// Event reason for a DCGM health-watch failure.
pub const REASON_HEALTH: &str = "DcgmHealthFailure";

/// Errors of the DCGM source.
#[derive(Debug, thiserror::Error)]
pub enum DcgmError {
    /// `dcgmi` could not be run (missing: the source is disabled).
    #[error(transparent)]
    Cmd(#[from] CmdError),
    /// The output is not JSON.
    #[error("dcgmi output is not JSON: {source}; stderr: {stderr}")]
    Json {
        /// Parse error.
        source: serde_json::Error,
        /// stderr tail, bounded.
        stderr: String,
    },
    /// The output is JSON but not a diagnostic report.
    #[error("dcgmi output has no {{\"DCGM GPU Diagnostic\" | \"DCGM Diagnostic\"}} object")]
    Shape,
    /// DCGM reported that the diagnostic could not run.
    #[error("dcgmi diag runtime error: {0}")]
    Runtime(String),
}

/// One failed test on one GPU (or on the node, when DCGM names no GPU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiagFailure {
    /// GPU index (`None`: the whole node, e.g. a deployment test).
    pub gpu: Option<String>,
    /// Test name as DCGM prints it.
    pub test: String,
    /// DCGM's warning text, bounded.
    pub message: String,
}

impl DiagFailure {
    /// The fault reported for this failure.
    pub fn to_fault(&self) -> AgentFault {
        AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NODE_CONDITION,
            code: format!("dcgm-{}", slug(&self.test)),
            device: self.gpu.clone(),
            reason: REASON_DIAG,
            message: bounded_text(
                &if self.message.is_empty() {
                    format!("DCGM diagnostic {:?} failed", self.test)
                } else {
                    format!("DCGM diagnostic {:?} failed: {}", self.test, self.message)
                },
                MAX_MESSAGE_CHARS,
            ),
        }
    }
}

/// `Page Retirement/Row Remap` → `page_retirement_row_remap`.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().take(64) {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str("unnamed");
    }
    out
}

/// Parse `dcgmi diag -j` output (text before the first `{` is ignored, as
/// some versions print a warning line first) into failed tests per GPU.
pub fn parse_diag(output: &str) -> Result<Vec<DiagFailure>, DcgmError> {
    let json = output.find('{').map_or(output, |i| &output[i..]);
    let v: Value = serde_json::from_str(json).map_err(|source| DcgmError::Json {
        source,
        stderr: String::new(),
    })?;
    diag_from_value(&v)
}

fn diag_from_value(v: &Value) -> Result<Vec<DiagFailure>, DcgmError> {
    let root = v
        .get("DCGM GPU Diagnostic")
        .or_else(|| v.get("DCGM Diagnostic"))
        .ok_or(DcgmError::Shape)?;
    if let Some(err) = root.get("runtime_error").and_then(Value::as_str) {
        return Err(DcgmError::Runtime(bounded_text(err, MAX_MESSAGE_CHARS)));
    }
    let mut out = Vec::new();
    let categories = root
        .get("test_categories")
        .and_then(Value::as_array)
        .ok_or(DcgmError::Shape)?;
    for cat in categories {
        let Some(tests) = cat.get("tests").and_then(Value::as_array) else {
            continue;
        };
        for test in tests.iter().filter(|t| t.is_object()) {
            let name = test
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("unnamed");
            let results: Vec<&Value> = test
                .get("results")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter(|x| x.is_object()).collect())
                .unwrap_or_default();
            if results.is_empty() {
                // 4.x may carry only a summary.
                if test
                    .get("test_summary")
                    .and_then(|s| s.get("status"))
                    .is_some_and(is_fail)
                {
                    out.push(DiagFailure {
                        gpu: None,
                        test: name.to_string(),
                        message: String::new(),
                    });
                }
                continue;
            }
            for r in results {
                if !r.get("status").is_some_and(is_fail) {
                    continue;
                }
                let message = warnings(r);
                for gpu in entities(r) {
                    out.push(DiagFailure {
                        gpu,
                        test: name.to_string(),
                        message: message.clone(),
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| (&a.gpu, &a.test).cmp(&(&b.gpu, &b.test)));
    out.dedup();
    Ok(out)
}

fn is_fail(status: &Value) -> bool {
    status
        .as_str()
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("fail"))
}

fn warnings(r: &Value) -> String {
    let Some(ws) = r.get("warnings").and_then(Value::as_array) else {
        return String::new();
    };
    let texts: Vec<&str> = ws
        .iter()
        .filter_map(|w| {
            w.get("warning")
                .and_then(Value::as_str)
                .or_else(|| w.as_str())
        })
        .take(4)
        .collect();
    bounded_text(&texts.join("; "), MAX_MESSAGE_CHARS)
}

/// The devices a result is about: `gpu_ids` ("0,1" or 0), `gpu_id`, or 4.x
/// `entity_group`/`entity_id` (GPUs by index, others as `<group><id>`).
fn entities(r: &Value) -> Vec<Option<String>> {
    let ids = r.get("gpu_ids").or_else(|| r.get("gpu_id"));
    match ids {
        Some(Value::Number(n)) => return vec![Some(n.to_string())],
        Some(Value::String(s)) => {
            let v: Vec<Option<String>> = s
                .split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty() && x.len() <= 8 && x.bytes().all(|b| b.is_ascii_digit()))
                .map(|x| Some(x.to_string()))
                .take(256)
                .collect();
            if !v.is_empty() {
                return v;
            }
        }
        _ => {}
    }
    if let Some(id) = r.get("entity_id").and_then(Value::as_u64) {
        let group = r
            .get("entity_group")
            .and_then(Value::as_str)
            .unwrap_or("GPU");
        return vec![Some(if group.eq_ignore_ascii_case("gpu") {
            id.to_string()
        } else {
            format!("{}{id}", slug(group))
        })];
    }
    vec![None]
}

/// One failed health watch from `dcgmi health -c -j`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthFailure {
    /// GPU index, if the report names one.
    pub gpu: Option<String>,
    /// Watched system (`pcie`, `memory`, ...), or `overall`.
    pub system: String,
    /// DCGM's text, bounded.
    pub message: String,
}

impl HealthFailure {
    /// The fault reported: code `dcgm-health-<system>`.
    pub fn to_fault(&self) -> AgentFault {
        AgentFault {
            family: Accelerator::Gpu,
            source: SOURCE_NODE_CONDITION,
            code: format!("dcgm-health-{}", slug(&self.system)),
            device: self.gpu.clone(),
            reason: REASON_HEALTH,
            message: bounded_text(
                &format!("DCGM health {}: {}", self.system, self.message),
                MAX_MESSAGE_CHARS,
            ),
        }
    }
}

/// Parse `dcgmi health -c -j` output, best effort: no real capture of this
/// output exists in the recorded data, so the walk only trusts what DCGM's
/// table output is known to contain: entity keys `GPU ID: <n>`, system keys
/// ending in ` system`, and health values `Failure` (a `Warning` is not a
/// fault). Unknown shapes yield no fault rather than a wrong one.
pub fn parse_health(output: &str) -> Result<Vec<HealthFailure>, DcgmError> {
    let json = output.find('{').map_or(output, |i| &output[i..]);
    let v: Value = serde_json::from_str(json).map_err(|source| DcgmError::Json {
        source,
        stderr: String::new(),
    })?;
    let mut out = Vec::new();
    walk_health(&v, None, None, 0, &mut out);
    out.sort_by(|a, b| (&a.gpu, &a.system).cmp(&(&b.gpu, &b.system)));
    out.dedup();
    Ok(out)
}

fn walk_health(
    v: &Value,
    gpu: Option<&str>,
    system: Option<&str>,
    depth: usize,
    out: &mut Vec<HealthFailure>,
) {
    if depth > 16 || out.len() > 256 {
        return;
    }
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let gpu_here = k.strip_prefix("GPU ID:").map(str::trim);
                let system_here = k
                    .strip_suffix(" system")
                    .or_else(|| k.strip_suffix(" System"));
                if let Some(s) = child.as_str() {
                    let failed = s.trim_start().starts_with("Failure");
                    if failed {
                        let sys = system_here.or(system).unwrap_or(if k.contains("Overall") {
                            "overall"
                        } else {
                            k.as_str()
                        });
                        out.push(HealthFailure {
                            gpu: gpu_here.or(gpu).map(str::to_string),
                            system: sys.to_string(),
                            message: bounded_text(s, MAX_MESSAGE_CHARS),
                        });
                    }
                    continue;
                }
                walk_health(
                    child,
                    gpu_here.or(gpu),
                    system_here.or(system),
                    depth + 1,
                    out,
                );
            }
        }
        Value::Array(items) => {
            for i in items.iter().take(1024) {
                walk_health(i, gpu, system, depth + 1, out);
            }
        }
        _ => {}
    }
}

/// Run `dcgmi diag -r <level> -j` and parse it.
pub async fn run_diag(
    binary: &str,
    level: u8,
    timeout: Duration,
) -> Result<Vec<DiagFailure>, DcgmError> {
    let level = level.to_string();
    let out = cmd::run(binary, &["diag", "-r", &level, "-j"], timeout).await?;
    parse_diag(&out.stdout).map_err(|e| with_stderr(e, &out.stderr))
}

/// Run `dcgmi health -c -j` and parse it.
pub async fn run_health(binary: &str, timeout: Duration) -> Result<Vec<HealthFailure>, DcgmError> {
    let out = cmd::run(binary, &["health", "-c", "-j"], timeout).await?;
    parse_health(&out.stdout).map_err(|e| with_stderr(e, &out.stderr))
}

fn with_stderr(e: DcgmError, stderr: &str) -> DcgmError {
    match e {
        DcgmError::Json { source, .. } => DcgmError::Json {
            source,
            stderr: bounded_text(stderr, MAX_MESSAGE_CHARS),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(
            slug("Page Retirement/Row Remap"),
            "page_retirement_row_remap"
        );
        assert_eq!(slug("sm_stress"), "sm_stress");
        assert_eq!(slug("  "), "unnamed");
    }

    #[test]
    fn four_x_entities_and_runtime_error() {
        let j = r#"{"DCGM Diagnostic":{"test_categories":[{"category":"Hardware","tests":[
            {"name":"memory","results":[
              {"entity_group":"GPU","entity_group_id":1,"entity_id":3,"status":"Fail",
               "warnings":[{"warning":"DBE","error_id":1,"error_category":1,"error_severity":1}]},
              {"entity_group":"GPU","entity_group_id":1,"entity_id":0,"status":"Pass"}],
             "test_summary":{"status":"Fail"}},
            {"name":"cpu_eud","results":[],"test_summary":{"status":"Fail"}}]}]},
            "metadata":{"version":"4.2.0"}}"#;
        let f = parse_diag(j).expect("parses");
        assert_eq!(
            f,
            vec![
                DiagFailure {
                    gpu: None,
                    test: "cpu_eud".into(),
                    message: String::new()
                },
                DiagFailure {
                    gpu: Some("3".into()),
                    test: "memory".into(),
                    message: "DBE".into()
                },
            ]
        );
        assert_eq!(f[1].to_fault().code, "dcgm-memory");
        let e = parse_diag(r#"{"DCGM Diagnostic":{"runtime_error":"no GPUs"}}"#);
        assert!(matches!(e, Err(DcgmError::Runtime(m)) if m == "no GPUs"));
        assert!(matches!(parse_diag(r#"{"x":1}"#), Err(DcgmError::Shape)));
        assert!(matches!(parse_diag("garbage"), Err(DcgmError::Json { .. })));
    }

    #[test]
    fn leading_warning_line_is_skipped() {
        let j =
            "WARNING: THIS SHOULD NOT HAPPEN\n{\"DCGM GPU Diagnostic\":{\"test_categories\":[]}}";
        assert_eq!(parse_diag(j).expect("parses"), vec![]);
    }

    #[test]
    fn health_failures_per_gpu_and_system() {
        let j = r#"{"Health Monitor Report":{"Overall Health":"Failure",
            "GPU ID: 0":{"Overall Health":"Failure","PCIe system":"Failure - more than 8 replays"},
            "GPU ID: 1":{"Overall Health":"Warning","Memory system":"Warning - SBE"}}}"#;
        let f = parse_health(j).expect("parses");
        let got: Vec<_> = f
            .iter()
            .map(|h| (h.gpu.clone(), h.to_fault().code))
            .collect();
        assert_eq!(
            got,
            vec![
                (None, "dcgm-health-overall".to_string()),
                (Some("0".into()), "dcgm-health-pcie".to_string()),
                (Some("0".into()), "dcgm-health-overall".to_string()),
            ]
        );
    }
}
