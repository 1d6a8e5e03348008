//! `rebound explain`: offline, from policy and classification files and a
//! fault, print the level, the chosen policy, the decision and why. For
//! GitOps pipelines that test their rules before merging.

pub mod args;
pub mod load;
mod render;

pub use args::{ExplainArgs, parse_fault, parse_job, parse_node, parse_now};
pub use load::{LoadError, Loaded, load_paths};
pub use render::render_text;

use crate::expr::NodeView;
use crate::policy::{Decision, Engine, JobInput, NodeConfig, NodeInput};
use chrono::{DateTime, Utc};
use kube::ResourceExt;

/// Build an engine from loaded objects; an object that does not compile is
/// an error naming its file, object and field (nothing is silently dropped).
#[allow(clippy::result_large_err)] // a CLI error naming file, object and field
pub fn engine_from(
    loaded: &Loaded,
    root_namespace: &str,
    total_nodes: u32,
) -> Result<(Engine, Vec<String>), LoadError> {
    let mut engine = Engine::new(root_namespace, NodeConfig::default(), total_nodes);
    let mut warnings = Vec::new();
    for (path, fc) in &loaded.classifications {
        engine
            .classifier
            .upsert(fc)
            .map_err(|e| LoadError::Invalid {
                path: path.clone(),
                kind: "FaultClassification".into(),
                name: fc.name_any(),
                field: e.field.clone(),
                message: format!("{} ({})", e.message, e.reason),
            })?;
    }
    for (path, p) in &loaded.policies {
        let mut p = p.clone();
        if p.metadata.namespace.is_none() {
            p.metadata.namespace = Some("default".into());
        }
        let w = engine.policies.upsert(&p).map_err(|e| LoadError::Invalid {
            path: path.clone(),
            kind: "RecoveryPolicy".into(),
            name: format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
            field: e.field.clone(),
            message: format!("{} ({})", e.message, e.reason),
        })?;
        warnings.extend(w.into_iter().map(|w| {
            format!(
                "{}: RecoveryPolicy {}: {} ({})",
                path.display(),
                p.name_any(),
                w.message,
                w.reason
            )
        }));
    }
    Ok((engine, warnings))
}

/// Why `rebound explain` could not decide: a file, or a flag.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Boxed: a load error names file, object and field (large, and rare).
    #[error(transparent)]
    Load(Box<LoadError>),
    #[error("no FaultClassification or RecoveryPolicy found in {files:?}")]
    NoObjects { files: Vec<std::path::PathBuf> },
    #[error("--{flag}: {message}")]
    Flag { flag: &'static str, message: String },
}

impl From<LoadError> for RunError {
    fn from(e: LoadError) -> Self {
        RunError::Load(Box::new(e))
    }
}

/// What `rebound explain` prints: the decision, and warnings about the
/// files (shadowed policies and the like).
#[derive(Debug)]
pub struct Explained {
    pub decision: Decision,
    pub warnings: Vec<String>,
}

/// `rebound explain` from its arguments: load the files, build the
/// engine, decide the fault for the job on the node at `--now` (else
/// `now`). The command prints the result; tests call this with the
/// arguments a document shows.
pub fn run(a: &ExplainArgs, now: DateTime<Utc>) -> Result<Explained, RunError> {
    let flag = |flag: &'static str| move |message: String| RunError::Flag { flag, message };
    let now = match &a.now {
        Some(t) => parse_now(t).map_err(flag("now"))?,
        None => now,
    };
    let loaded = load_paths(&a.files)?;
    if loaded.classifications.is_empty() && loaded.policies.is_empty() {
        return Err(RunError::NoObjects {
            files: a.files.clone(),
        });
    }
    let (mut engine, warnings) = engine_from(&loaded, &a.root_namespace, a.nodes)?;
    let fault = parse_fault(&a.fault, now).map_err(flag("fault"))?;
    let job = a
        .job
        .as_deref()
        .map(|j| parse_job(j, &a.restarts_ago, &a.hw_restarts_ago, now))
        .transpose()
        .map_err(flag("job"))?;
    let node = match (&a.node, fault.node.as_deref()) {
        (None, _) => None,
        (Some(n), Some(name)) => Some(parse_node(n, name).map_err(flag("node"))?),
        (Some(_), None) => {
            return Err(RunError::Flag {
                flag: "node",
                message: "the fault names no node (add node=NAME to --fault)".into(),
            });
        }
    };
    let mut decision = explain_on(&mut engine, fault, node, job, a.repeat.max(1), now);
    note_wiring(&engine, &mut decision, a.wiring.as_deref());
    note_device_scope(&engine, &mut decision);
    Ok(Explained { decision, warnings })
}

/// Decide one fault (seen `repeat` times, one minute apart, the last now)
/// for an optional job, on a node with no other fault.
pub fn explain(
    engine: &mut Engine,
    fault: crate::fault::Fault,
    job: Option<JobInput>,
    repeat: u32,
    now: DateTime<Utc>,
) -> Decision {
    explain_on(engine, fault, None, job, repeat, now)
}

/// [`explain`] on a node as `node` describes it before the fault (its
/// labels, level and faults, for CEL's `node`).
pub fn explain_on(
    engine: &mut Engine,
    fault: crate::fault::Fault,
    node: Option<NodeView>,
    job: Option<JobInput>,
    repeat: u32,
    now: DateTime<Utc>,
) -> Decision {
    for i in (1..repeat).rev() {
        let mut earlier = fault.clone();
        earlier.last_seen = now - chrono::Duration::minutes(i as i64);
        earlier.first_seen = earlier.last_seen;
        engine.classifier.classify(earlier, node.as_ref(), now);
    }
    let target = fault.node.as_ref().map(|n| NodeInput {
        name: n.clone(),
        ..Default::default()
    });
    let jobs: Vec<JobInput> = job
        .or_else(|| args::job_from_fault(&fault))
        .into_iter()
        .collect();
    engine.decide(fault, target.as_ref(), node.as_ref(), &jobs, now)
}

/// What a fault on one device does on a DRA cluster, which explain
/// (offline, no ResourceSlices or ResourceClaims) cannot decide itself:
/// said on the node's and the jobs' decisions (docs/devices.md).
pub fn note_device_scope(engine: &Engine, d: &mut Decision) {
    let Some(device) = d.fault.device.clone() else {
        return;
    };
    let (cfg, _) = engine.policies.node_config(&engine.node_default);
    let device_isolation = cfg.isolation == crate::api::Isolation::Device;
    if d.level.cordons_node() {
        if let Some(n) = &mut d.node
            && device_isolation
        {
            n.reasons.push(format!(
                "isolation: Device: where GPUs are allocated through DRA, device {device} is published in a ResourceSlice and DeviceTaintRules are served, rebound isolates that device (a DeviceTaintRule) instead of this node action{}",
                if cfg.validation.is_some() {
                    ", and returns it only after its validation Job passes"
                } else {
                    ""
                }
            ));
        }
        if !device_isolation {
            return;
        }
    }
    for j in &mut d.jobs {
        j.reasons.push(format!(
            "device scope: where GPUs are allocated through DRA, only jobs whose pods' ResourceClaims hold device {device} are restarted (with device plugins, the jobs of the pods the node agent reports holding it)"
        ));
    }
}

/// What the in-place tiers of the chosen policy depend on, added to the
/// reasons of each job restart: the job's wiring (`wiring`: `template`,
/// `admission` or `none`, as `--wiring` says; unsaid, what in place needs).
/// The controller says the same in its decisions and `JobRestarted` Events,
/// from the pods it sees; offline there are no pods, so the user says.
pub fn note_wiring(engine: &Engine, d: &mut Decision, wiring: Option<&str>) {
    use crate::api::RecoveryTier;
    use crate::policy::JobAction;
    for j in &mut d.jobs {
        if !matches!(j.action, Some(JobAction::RestartJob { .. })) || j.skip.is_some() {
            continue;
        }
        let Some(policy) = j
            .policy
            .as_deref()
            .and_then(|id| id.split_once('/'))
            .and_then(|(ns, name)| engine.policies.get(ns, name))
        else {
            continue;
        };
        let tiers = &policy.restart.tiers;
        if !tiers
            .iter()
            .any(|t| matches!(t, RecoveryTier::InPlace | RecoveryTier::ReplaceFaulty))
        {
            continue;
        }
        j.reasons.push(match wiring {
            Some("template") => "in place: the job's pods are wired in their pod templates (rebound inject)".into(),
            Some("admission") => "in place: the job's pods are wired at admission (MutatingAdmissionPolicy rebound-restart-agent)".into(),
            Some(_) => "not in place: the job's pods lack the in-place wiring (rebound inject on the job's manifest, or the admission policy rebound-restart-agent with the label kcover.io/cascading-recovery=true on the pods); falling back to Recreate".into(),
            None => "in place needs the job's pods wired (rebound inject, or the admission policy rebound-restart-agent for pods labelled kcover.io/cascading-recovery=true), else Recreate; say which with --wiring template|admission|none".into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const OBJECTS: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: FaultClassification
metadata: {name: xid}
spec:
  source: NvidiaXid
  defaultLevel: RestartJob
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: tiers, namespace: ml}
spec:
  selector:
    matchLabels: {team: a}
  restart:
    tiers: [InPlace, Recreate]
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: recreate, namespace: other}
spec:
  selector:
    matchLabels: {team: a}
"#;

    fn reasons(ns: &str, wiring: Option<&str>) -> Vec<String> {
        let mut loaded = load::Loaded::default();
        load::load_str(Path::new("t.yaml"), OBJECTS, &mut loaded).expect("load");
        let (mut engine, _) = engine_from(&loaded, "rebound-system", 10).expect("engine");
        let now = Utc::now();
        let fault = parse_fault("source=NvidiaXid,code=13,node=n1", now).expect("fault");
        let job = parse_job(
            &format!("kind=PyTorchJob,name=j,namespace={ns},labels.team=a"),
            &[],
            &[],
            now,
        )
        .expect("job");
        let mut d = explain(&mut engine, fault, Some(job), 1, now);
        note_wiring(&engine, &mut d, wiring);
        d.jobs[0].reasons.clone()
    }

    #[test]
    fn a_restart_with_in_place_tiers_says_which_wiring_it_depends_on() {
        let has = |r: &[String], s: &str| r.iter().any(|x| x.contains(s));
        assert!(has(&reasons("ml", Some("admission")), "wired at admission"));
        assert!(has(&reasons("ml", Some("template")), "(rebound inject)"));
        assert!(has(
            &reasons("ml", Some("none")),
            "lack the in-place wiring"
        ));
        assert!(has(&reasons("ml", None), "--wiring"));
        // A policy that only recreates says nothing of wiring.
        let r = reasons("other", Some("admission"));
        assert!(!has(&r, "wir"), "{r:?}");
    }
}
