//! `rebound explain`: offline, from policy and classification files and a
//! fault, print the level, the chosen policy, the decision and why. For
//! GitOps pipelines that test their rules before merging.

pub mod args;
pub mod load;
mod render;

pub use args::{ExplainArgs, parse_fault, parse_job};
pub use load::{LoadError, Loaded, load_paths};
pub use render::render_text;

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

/// Decide one fault (seen `repeat` times, one minute apart, the last now)
/// for an optional job.
pub fn explain(
    engine: &mut Engine,
    fault: crate::fault::Fault,
    job: Option<JobInput>,
    repeat: u32,
    now: DateTime<Utc>,
) -> Decision {
    for i in (1..repeat).rev() {
        let mut earlier = fault.clone();
        earlier.last_seen = now - chrono::Duration::minutes(i as i64);
        earlier.first_seen = earlier.last_seen;
        engine.classifier.classify(earlier, None, now);
    }
    let node = fault.node.as_ref().map(|n| NodeInput {
        name: n.clone(),
        ..Default::default()
    });
    let jobs: Vec<JobInput> = job
        .or_else(|| args::job_from_fault(&fault))
        .into_iter()
        .collect();
    engine.decide(fault, node.as_ref(), None, &jobs, now)
}
