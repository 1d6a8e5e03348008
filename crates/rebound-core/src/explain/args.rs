//! Command-line arguments of `rebound explain` and their parsing.

use crate::api::{WorkloadKind, duration};
use crate::expr::{MAX_LIST, NodeView};
use crate::fault::{Fault, FaultSource, Level};
use crate::policy::{JobInput, RestartRecord};
use chrono::{DateTime, Utc};
use std::path::PathBuf;

/// `rebound explain` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ExplainArgs {
    /// Policy and classification YAML files or folders (e.g. `samples/`).
    #[arg(short = 'f', long = "file", required = true)]
    pub files: Vec<PathBuf>,
    /// The fault: `source=NvidiaXid,code=79,node=gpu-7[,device=0,pod=P,namespace=NS,container=C,exitCode=137,reason=OOMKilled,trusted=true]`.
    /// `trusted` defaults to true for the sources the controller trusts
    /// (NvidiaXid, AscendNpu, NodeCondition), false for PodExit, Hang and
    /// KubeEvent (a tenant's Event; `trusted=true` for one in kube-system
    /// or the root namespace).
    #[arg(long)]
    pub fault: String,
    /// The affected job: `kind=PyTorchJob,name=llm,namespace=team-a[,labels.K=V,annotations.K=V,replicas=N,restartPolicy=Never,running=true]`.
    /// Without it and with a pod in the fault, the bare pod is the workload.
    #[arg(long)]
    pub job: Option<String>,
    /// The fault's node before the fault, as CEL's `node` sees it:
    /// `labels.K=V,level=ResetDevice,faults=48;94` (fault codes separated
    /// by `;`). The fault itself is added to it when it is trusted. Without
    /// it the node has no labels and no other fault.
    #[arg(long)]
    pub node: Option<String>,
    /// The time of the decision (RFC 3339, e.g. `2026-11-29T12:00:00Z`) for
    /// expressions that read `now`; default: the current time.
    #[arg(long)]
    pub now: Option<String>,
    /// Ages of the job's earlier restarts, e.g. `5m,40m,3h`.
    #[arg(long, value_delimiter = ',')]
    pub restarts_ago: Vec<String>,
    /// Ages of earlier restarts caused by hardware faults.
    #[arg(long, value_delimiter = ',')]
    pub hw_restarts_ago: Vec<String>,
    /// The fault was seen this many times (one minute apart, the last now).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// The operator's root namespace (cluster-default policies).
    #[arg(long, default_value = "rebound-system")]
    pub root_namespace: String,
    /// Nodes in the cluster (for percentage breaker limits).
    #[arg(long, default_value_t = 100)]
    pub nodes: u32,
    /// How the job's pods carry the in-place restart agent, for policies
    /// whose `spec.restart.tiers` restart in place: `template` (`rebound
    /// inject`), `admission` (the `rebound-restart-agent` admission
    /// policy) or `none`. Unsaid, the decision says what in place needs.
    #[arg(long, value_parser = ["template", "admission", "none"])]
    pub wiring: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

fn pairs(s: &str) -> Result<Vec<(String, String)>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("{p:?} is not key=value"))
        })
        .collect()
}

fn boolean(k: &str, v: &str) -> Result<bool, String> {
    v.parse()
        .map_err(|_| format!("{k}={v:?}: expected true or false"))
}

/// Parse `--fault`.
pub fn parse_fault(s: &str, now: DateTime<Utc>) -> Result<Fault, String> {
    let kv = pairs(s)?;
    let source: FaultSource = kv
        .iter()
        .find(|(k, _)| k == "source")
        .ok_or("the fault needs source=...")?
        .1
        .parse()?;
    let mut f = Fault::new(source, "", now);
    // As the controller does: pod exits and hangs are a tenant's own, an
    // Event is trusted only where a tenant cannot write.
    f.trusted = !matches!(
        source,
        FaultSource::KubeEvent | FaultSource::PodExit | FaultSource::Hang
    );
    for (k, v) in kv {
        match k.as_str() {
            "source" => {}
            "code" => f.code = v,
            "node" => f.node = Some(v),
            "device" => f.device = Some(v),
            "pod" => f.pod = Some(v),
            "namespace" => f.namespace = Some(v),
            "container" => f.container = Some(v),
            "reason" => f.reason = Some(v),
            "message" => f.message = Some(v),
            "exitCode" => {
                let n: i32 = v
                    .parse()
                    .map_err(|_| format!("exitCode={v:?} is not an integer"))?;
                f.exit_code = Some(n);
                if f.code.is_empty() {
                    f.code = n.to_string();
                }
            }
            "trusted" => f.trusted = boolean(&k, &v)?,
            // When the fault was first seen (RFC 3339), for rules on its
            // age (`now - fault.firstSeen`); default: now.
            "firstSeen" => {
                f.first_seen = chrono::DateTime::parse_from_rfc3339(&v)
                    .map_err(|e| format!("firstSeen={v:?}: {e}"))?
                    .with_timezone(&chrono::Utc);
            }
            other => return Err(format!("unknown fault field {other:?}")),
        }
    }
    if f.code.is_empty() {
        match &f.reason {
            Some(r) => f.code = r.clone(),
            None => return Err("the fault needs code=... (or exitCode/reason)".into()),
        }
    }
    Ok(f)
}

/// Parse `--job` and the restart history flags.
pub fn parse_job(
    s: &str,
    restarts_ago: &[String],
    hw_restarts_ago: &[String],
    now: DateTime<Utc>,
) -> Result<JobInput, String> {
    let mut j = JobInput::default();
    for (k, v) in pairs(s)? {
        if let Some(label) = k.strip_prefix("labels.") {
            j.view.labels.insert(label.to_string(), v);
            continue;
        }
        if let Some(a) = k.strip_prefix("annotations.") {
            j.view.annotations.insert(a.to_string(), v);
            continue;
        }
        match k.as_str() {
            "kind" => {
                j.kind = Some(v.parse::<WorkloadKind>()?);
                j.view.kind = v;
            }
            "name" => j.view.name = v,
            "namespace" => j.view.namespace = v,
            "restartPolicy" => j.restart_policy_never = v == "Never",
            "running" => j.running = boolean(&k, &v)?,
            "replicas" => j.view.replicas = v.parse().map_err(|_| format!("replicas={v:?}"))?,
            other => return Err(format!("unknown job field {other:?}")),
        }
    }
    if j.view.namespace.is_empty() {
        j.view.namespace = "default".into();
    }
    if j.kind.is_none() {
        return Err("the job needs kind=...".into());
    }
    let mut hist = Vec::new();
    for (list, infrastructure) in [(restarts_ago, false), (hw_restarts_ago, true)] {
        for a in list {
            let d = duration::parse(a)?;
            hist.push(RestartRecord {
                at: now - chrono::Duration::from_std(d).map_err(|e| e.to_string())?,
                infrastructure,
                pod_only: false,
                ..Default::default()
            });
        }
    }
    hist.sort_by_key(|r| r.at);
    j.history = hist;
    Ok(j)
}

/// Parse `--node` for the fault's node `name`.
pub fn parse_node(s: &str, name: &str) -> Result<NodeView, String> {
    let mut n = NodeView {
        name: name.to_string(),
        ..Default::default()
    };
    for (k, v) in pairs(s)? {
        if let Some(label) = k.strip_prefix("labels.") {
            n.labels.insert(label.to_string(), v);
            continue;
        }
        match k.as_str() {
            "level" => n.level = Some(v.parse::<Level>()?),
            "faults" => {
                n.faults = v
                    .split(';')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect();
                if n.faults.len() > MAX_LIST {
                    return Err(format!(
                        "faults: {} codes; a node carries at most {MAX_LIST}",
                        n.faults.len()
                    ));
                }
            }
            other => return Err(format!("unknown node field {other:?}")),
        }
    }
    Ok(n)
}

/// Parse `--now`.
pub fn parse_now(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{s:?} is not an RFC 3339 time: {e}"))
}

/// A bare pod as the workload when only the fault names one.
pub fn job_from_fault(f: &Fault) -> Option<JobInput> {
    let pod = f.pod.clone()?;
    let mut j = JobInput {
        kind: Some(WorkloadKind::Pod),
        ..Default::default()
    };
    j.view.kind = "Pod".into();
    j.view.name = pod;
    j.view.namespace = f.namespace.clone().unwrap_or_else(|| "default".into());
    Some(j)
}
