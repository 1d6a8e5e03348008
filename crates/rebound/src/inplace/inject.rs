//! `rebound inject`: wire the pod templates of job manifests for in-place
//! restarts (docs/in-place.md, "Wiring a job"), as `linkerd inject` does
//! for its proxy. This module knows the job kinds: where each keeps its pod
//! templates, which label names the job on its pods, and which API object
//! the agent watches. [`super::inject_pod`] changes one template;
//! [`super::inject_cli`] reads and writes the files.
//!
//! Kubeflow Trainer v2: a `TrainJob` cannot carry a sidecar itself (its
//! `podSpecOverrides`, `podTemplateOverrides` in later versions, may only
//! change containers its runtime already has), so the agent goes into the
//! `TrainingRuntime` or `ClusterTrainingRuntime` it references; the pods of
//! every TrainJob of that runtime are then wired, and their agent watches
//! the TrainJob (named by the JobSet's `jobset-name` label, which is the
//! TrainJob's name).

use serde_json::Value;

use super::inject_pod::{self, AgentSettings, AgentTarget, Refusal};
use super::{DEFAULT_EXIT_CODE, DEFAULT_PROBE_PORT};

/// The agent image when `--image` is not given: the image the Helm chart
/// and `config/` run (`rebound:<appVersion>`).
pub const DEFAULT_IMAGE: &str = concat!("rebound:", env!("CARGO_PKG_VERSION"));

/// Label of Kubeflow training-operator v1 pods naming their job.
pub const KUBEFLOW_JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";
/// Label of Volcano pods naming their job.
pub const VOLCANO_JOB_NAME_LABEL: &str = "volcano.sh/job-name";
/// Label of JobSet pods naming their JobSet (also on the pods of a
/// TrainJob, whose JobSet has the TrainJob's name).
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// Label of batch Job pods naming their Job (Kubernetes 1.27+).
pub const BATCH_JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Label of a TrainingRuntime's replicated jobs: which TrainJob step they
/// run (`trainer`, `dataset-initializer`, `model-initializer`).
pub const TRAINER_ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// Kubeflow training-operator v1 kinds: kind, plural, replica-specs field.
pub const KUBEFLOW_KINDS: [(&str, &str, &str); 6] = [
    ("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"),
    ("TFJob", "tfjobs", "tfReplicaSpecs"),
    ("MPIJob", "mpijobs", "mpiReplicaSpecs"),
    ("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"),
    ("PaddleJob", "paddlejobs", "paddleReplicaSpecs"),
    ("JAXJob", "jaxjobs", "jaxReplicaSpecs"),
];

/// Options of an injection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectOptions {
    /// The agent's container image.
    pub image: String,
    /// The exit code of the agent's `RestartAllContainers` rule (1-255).
    pub exit_code: i32,
    /// The agent's probe port.
    pub probe_port: u16,
}

impl Default for InjectOptions {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.to_string(),
            exit_code: DEFAULT_EXIT_CODE,
            probe_port: DEFAULT_PROBE_PORT,
        }
    }
}

impl InjectOptions {
    /// Refuse settings a pod cannot work with: an exit code the agent can
    /// also end with when it fails, or that is never seen
    /// ([`super::exit_code_conflict`]), port 0 (refused by the API server),
    /// and an empty image (refused by the kubelet).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(why) = super::exit_code_conflict(self.exit_code) {
            return Err(format!("--exit-code {}: {why}", self.exit_code));
        }
        if self.probe_port == 0 {
            return Err("--probe-port 0: must be 1-65535".into());
        }
        if self.image.trim().is_empty() {
            return Err("--image: must not be empty".into());
        }
        Ok(())
    }

    fn settings(&self) -> AgentSettings<'_> {
        AgentSettings {
            image: &self.image,
            exit_code: self.exit_code,
            probe_port: self.probe_port,
        }
    }
}

/// A job kind `rebound inject` wires, as read from a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobKind {
    /// Kubeflow training-operator v1 (`kubeflow.org`): kind, plural, the
    /// replica-specs field.
    Kubeflow {
        /// `PyTorchJob`, `TFJob`, ...
        kind: &'static str,
        /// `pytorchjobs`, ...
        plural: &'static str,
        /// `pytorchReplicaSpecs`, ...
        specs: &'static str,
    },
    /// Volcano `batch.volcano.sh` Job.
    Volcano,
    /// `jobset.x-k8s.io` JobSet.
    JobSet,
    /// `batch` Job.
    BatchJob,
    /// Trainer v2 `TrainingRuntime` (`cluster: false`) or
    /// `ClusterTrainingRuntime`: the template of the TrainJobs' JobSets.
    TrainingRuntime {
        /// Cluster-scoped.
        cluster: bool,
    },
    /// Trainer v2 `TrainJob`: no pod template of its own.
    TrainJob,
}

fn group_version(doc: &Value) -> (&str, &str) {
    let av = doc["apiVersion"].as_str().unwrap_or_default();
    match av.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", av),
    }
}

/// The job kind of a document, `None` for every other kind (passed
/// through untouched).
pub fn kind_of(doc: &Value) -> Option<JobKind> {
    let (group, _) = group_version(doc);
    let kind = doc["kind"].as_str()?;
    match (group, kind) {
        ("kubeflow.org", k) => {
            KUBEFLOW_KINDS
                .iter()
                .find(|(name, _, _)| *name == k)
                .map(|&(kind, plural, specs)| JobKind::Kubeflow {
                    kind,
                    plural,
                    specs,
                })
        }
        ("batch.volcano.sh", "Job") => Some(JobKind::Volcano),
        ("jobset.x-k8s.io", "JobSet") => Some(JobKind::JobSet),
        ("batch", "Job") => Some(JobKind::BatchJob),
        ("trainer.kubeflow.org", "TrainingRuntime") => {
            Some(JobKind::TrainingRuntime { cluster: false })
        }
        ("trainer.kubeflow.org", "ClusterTrainingRuntime") => {
            Some(JobKind::TrainingRuntime { cluster: true })
        }
        ("trainer.kubeflow.org", "TrainJob") => Some(JobKind::TrainJob),
        _ => None,
    }
}

/// A document refused: which one, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{doc}: {field}: {reason}")]
pub struct DocRefusal {
    /// The document (`job.yaml document 2 (PyTorchJob ml/llama)`).
    pub doc: String,
    /// The offending field from the document's root.
    pub field: String,
    /// Why, and what to do.
    pub reason: String,
}

/// What injecting one document did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DocReport {
    /// Pod templates wired (changed or already up to date).
    pub templates: usize,
    /// The document differs from the input.
    pub changed: bool,
    /// Things the user should know about this document; it is still
    /// written.
    pub warnings: Vec<String>,
    /// Things the user should know about the document's kind (the same
    /// for every document of it: said once per run).
    pub caveats: Vec<String>,
}

/// Where a document's pod templates are, as (path for messages, pointer).
struct Templates {
    target_api: String,
    label: &'static str,
    /// JSON pointers of the templates, with their dotted paths.
    at: Vec<(String, String)>,
    warnings: Vec<String>,
    caveats: Vec<String>,
}

fn esc(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Replicated jobs of a JobSet spec at `base` (pointer) / `dotted`.
fn replicated_jobs(
    spec: &Value,
    base: &str,
    dotted: &str,
    skip_initializers: bool,
) -> Result<Vec<(String, String)>, Refusal> {
    let rjobs = match spec.get("replicatedJobs") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(Refusal {
                field: format!("{dotted}.replicatedJobs"),
                reason: "must be a list".into(),
            });
        }
    };
    let mut out = Vec::new();
    for (i, rj) in rjobs.iter().enumerate() {
        let step = rj["template"]["metadata"]["labels"][TRAINER_ANCESTOR_LABEL].as_str();
        if skip_initializers && matches!(step, Some("dataset-initializer" | "model-initializer")) {
            // Initializers run once to completion before the trainer
            // nodes; they are no ranks of the training and never wait at
            // a barrier.
            continue;
        }
        out.push((
            format!("{dotted}.replicatedJobs[{i}].template.spec.template"),
            format!("{base}/replicatedJobs/{i}/template/spec/template"),
        ));
    }
    Ok(out)
}

fn refuse_jobset_in_place(spec: &Value, dotted: &str) -> Result<(), Refusal> {
    if spec["failurePolicy"]["restartStrategy"].as_str() == Some("InPlaceRestart") {
        return Err(Refusal {
            field: format!("{dotted}.failurePolicy.restartStrategy"),
            reason: "JobSet's own InPlaceRestart runs its own agent and barrier (pod annotation jobset.sigs.k8s.io/in-place-restart-attempt) and would race rebound's; keep Recreate (rebound restarts in place itself) or do not inject".into(),
        });
    }
    Ok(())
}

fn templates_of(doc: &Value, kind: &JobKind) -> Result<Templates, Refusal> {
    let (group, version) = group_version(doc);
    let spec = &doc["spec"];
    let mut t = Templates {
        target_api: String::new(),
        label: BATCH_JOB_NAME_LABEL,
        at: Vec::new(),
        warnings: Vec::new(),
        caveats: Vec::new(),
    };
    match kind {
        JobKind::Kubeflow { plural, specs, .. } => {
            t.target_api = format!("{group}/{version}/{plural}");
            t.label = KUBEFLOW_JOB_NAME_LABEL;
            match &spec[*specs] {
                Value::Object(m) => {
                    for rtype in m.keys() {
                        t.at.push((
                            format!("spec.{specs}.{rtype}.template"),
                            format!("/spec/{specs}/{}/template", esc(rtype)),
                        ));
                    }
                }
                Value::Null => {}
                _ => {
                    return Err(Refusal {
                        field: format!("spec.{specs}"),
                        reason: "must be a map of replica types".into(),
                    });
                }
            }
            t.caveats.push(format!(
                "{kind}: the training-operator v1 CRDs (v1.9) do not know restartPolicyRules: a real API server refuses the rule (kubectl's default strict validation) or drops it, and an operator built on Kubernetes API types older than 1.34 drops it from the pods; rebound then recreates these pods instead of restarting them in place (docs/in-place.md)",
                kind = doc["kind"].as_str().unwrap_or_default()
            ));
        }
        JobKind::Volcano => {
            t.target_api = format!("{group}/{version}/jobs");
            t.label = VOLCANO_JOB_NAME_LABEL;
            match &spec["tasks"] {
                Value::Array(tasks) => {
                    for i in 0..tasks.len() {
                        t.at.push((
                            format!("spec.tasks[{i}].template"),
                            format!("/spec/tasks/{i}/template"),
                        ));
                    }
                }
                Value::Null => {}
                _ => {
                    return Err(Refusal {
                        field: "spec.tasks".into(),
                        reason: "must be a list".into(),
                    });
                }
            }
        }
        JobKind::JobSet => {
            refuse_jobset_in_place(spec, "spec")?;
            t.target_api = format!("{group}/{version}/jobsets");
            t.label = JOBSET_NAME_LABEL;
            t.at = replicated_jobs(spec, "/spec", "spec", false)?;
        }
        JobKind::BatchJob => {
            t.target_api = format!("{group}/{version}/jobs");
            t.label = BATCH_JOB_NAME_LABEL;
            t.at.push(("spec.template".into(), "/spec/template".into()));
        }
        JobKind::TrainingRuntime { .. } => {
            let js = &spec["template"]["spec"];
            refuse_jobset_in_place(js, "spec.template.spec")?;
            t.target_api = format!("{group}/{version}/trainjobs");
            t.label = JOBSET_NAME_LABEL;
            t.at = replicated_jobs(js, "/spec/template/spec", "spec.template.spec", true)?;
            t.caveats.push("Trainer v2 runtime: CRDs generated before Kubernetes 1.35 (such as trainer a55f03a's) do not know restartPolicyRules: check that your Trainer release keeps the rule (docs/in-place.md)".into());
        }
        JobKind::TrainJob => {
            let runtime = &spec["runtimeRef"];
            t.warnings.push(format!(
                "a TrainJob cannot carry the agent (spec.podSpecOverrides may only change containers its runtime has): inject its runtime instead, e.g. `kubectl get {} {} -o yaml | rebound inject -f -`",
                runtime["kind"]
                    .as_str()
                    .unwrap_or("ClusterTrainingRuntime")
                    .to_lowercase(),
                runtime["name"].as_str().unwrap_or("<runtime>")
            ));
        }
    }
    Ok(t)
}

/// Wire every pod template of one document of a supported kind (others
/// are left alone). `doc_name` names the document in errors. On a refusal
/// the document is unchanged. `opts` must have passed
/// [`InjectOptions::validate`] (the command line does that).
pub fn inject_document(
    doc: &mut Value,
    opts: &InjectOptions,
    doc_name: &str,
) -> Result<DocReport, DocRefusal> {
    let Some(kind) = kind_of(doc) else {
        return Ok(DocReport::default());
    };
    let at_doc = |r: Refusal| DocRefusal {
        doc: doc_name.to_string(),
        field: r.field,
        reason: r.reason,
    };
    let t = templates_of(doc, &kind).map_err(at_doc)?;
    let target = AgentTarget {
        job_api: &t.target_api,
        job_name_label: t.label,
    };
    let settings = opts.settings();
    // All or nothing: one refused template leaves the document as it was.
    let mut out = doc.clone();
    let mut report = DocReport {
        warnings: t.warnings.clone(),
        caveats: t.caveats.clone(),
        ..DocReport::default()
    };
    for (dotted, ptr) in &t.at {
        let Some(tpl) = out.pointer_mut(ptr) else {
            return Err(at_doc(Refusal {
                field: dotted.clone(),
                reason: "missing: every replica needs a pod template".into(),
            }));
        };
        let ch = inject_pod::wire(tpl, dotted, &target, &settings).map_err(at_doc)?;
        report.templates += 1;
        report.changed |= ch.changed;
        report.warnings.extend(ch.warnings);
    }
    *doc = out;
    Ok(report)
}

/// Remove the agent from every pod template of one document; the number
/// of templates it was removed from.
pub fn uninject_document(doc: &mut Value) -> usize {
    let Some(kind) = kind_of(doc) else {
        return 0;
    };
    let Ok(t) = templates_of(doc, &kind) else {
        return 0;
    };
    let mut n = 0;
    for (_, ptr) in &t.at {
        if let Some(tpl) = doc.pointer_mut(ptr)
            && inject_pod::unwire(tpl)
        {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests;
