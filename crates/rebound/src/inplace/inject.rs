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
mod tests {
    use super::*;
    use crate::inplace::AGENT_CONTAINER;
    use serde_json::json;

    fn pod(name: &str) -> Value {
        json!({"spec": {"containers": [{"name": name, "image": "img"}]}})
    }

    fn agent_at<'a>(doc: &'a Value, ptr: &str) -> &'a Value {
        doc.pointer(ptr)
            .and_then(|t| t["spec"]["initContainers"].as_array())
            .and_then(|a| a.iter().find(|c| c["name"] == AGENT_CONTAINER))
            .unwrap_or_else(|| panic!("no agent at {ptr}"))
    }

    fn env<'a>(agent: &'a Value, name: &str) -> &'a Value {
        agent["env"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == name))
            .unwrap_or_else(|| panic!("no env {name}"))
    }

    fn job_name_path(agent: &Value) -> &str {
        env(agent, "REBOUND_JOB_NAME")["valueFrom"]["fieldRef"]["fieldPath"]
            .as_str()
            .unwrap_or_default()
    }

    fn inject(doc: &mut Value) -> DocReport {
        inject_document(doc, &InjectOptions::default(), "test").expect("inject")
    }

    #[test]
    fn every_kubeflow_kind_wires_every_replica() {
        for (kind, plural, specs) in KUBEFLOW_KINDS {
            let mut doc = json!({
                "apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "j"},
                "spec": {specs: {"Master": {"replicas": 1, "template": pod("m")},
                                 "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": pod("w")}}},
            });
            let r = inject(&mut doc);
            assert_eq!(r.templates, 2, "{kind}");
            assert!(r.changed);
            for rt in ["Master", "Worker"] {
                let a = agent_at(&doc, &format!("/spec/{specs}/{rt}/template"));
                assert_eq!(
                    env(a, "REBOUND_JOB_API")["value"],
                    format!("kubeflow.org/v1/{plural}")
                );
                assert_eq!(
                    job_name_path(a),
                    "metadata.labels['training.kubeflow.org/job-name']"
                );
            }
            assert_eq!(
                doc["spec"][specs]["Worker"]["restartPolicy"], "OnFailure",
                "replica fields untouched"
            );
            assert!(
                r.caveats.iter().any(|w| w.contains("restartPolicyRules")),
                "{kind}: the CRD caveat is said"
            );
        }
    }

    #[test]
    fn volcano_jobset_batch_and_runtimes_wire_their_templates() {
        let mut v = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
            "spec": {"tasks": [{"name": "a", "template": pod("a")}, {"name": "b", "template": pod("b")}]}});
        assert_eq!(inject(&mut v).templates, 2);
        let a = agent_at(&v, "/spec/tasks/1/template");
        assert_eq!(
            env(a, "REBOUND_JOB_API")["value"],
            "batch.volcano.sh/v1alpha1/jobs"
        );
        assert_eq!(job_name_path(a), "metadata.labels['volcano.sh/job-name']");

        let rj = |name: &str| json!({"name": name, "replicas": 2, "template": {"spec": {"parallelism": 2, "template": pod(name)}}});
        let mut js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
            "spec": {"replicatedJobs": [rj("driver"), rj("workers")]}});
        assert_eq!(inject(&mut js).templates, 2);
        let a = agent_at(&js, "/spec/replicatedJobs/1/template/spec/template");
        assert_eq!(
            env(a, "REBOUND_JOB_API")["value"],
            "jobset.x-k8s.io/v1alpha2/jobsets"
        );
        assert_eq!(
            job_name_path(a),
            "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
        );

        let mut b = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"},
            "spec": {"completions": 4, "template": pod("w")}});
        assert_eq!(inject(&mut b).templates, 1);
        let a = agent_at(&b, "/spec/template");
        assert_eq!(env(a, "REBOUND_JOB_API")["value"], "batch/v1/jobs");
        assert_eq!(
            job_name_path(a),
            "metadata.labels['batch.kubernetes.io/job-name']"
        );

        for kind in ["TrainingRuntime", "ClusterTrainingRuntime"] {
            let step = |name: &str, s: &str| {
                json!({"name": name, "template": {"metadata": {"labels": {TRAINER_ANCESTOR_LABEL: s}},
                "spec": {"template": pod(name)}}})
            };
            let mut rt = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": {"name": "torch"},
            "spec": {"mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [
                step("dataset-initializer", "dataset-initializer"),
                step("model-initializer", "model-initializer"),
                step("node", "trainer"),
            ]}}}});
            let r = inject(&mut rt);
            assert_eq!(r.templates, 1, "{kind}: only the trainer nodes");
            let a = agent_at(
                &rt,
                "/spec/template/spec/replicatedJobs/2/template/spec/template",
            );
            assert_eq!(
                env(a, "REBOUND_JOB_API")["value"],
                "trainer.kubeflow.org/v1alpha1/trainjobs"
            );
            assert_eq!(
                job_name_path(a),
                "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
            );
            assert!(
                rt.pointer("/spec/template/spec/replicatedJobs/0/template/spec/template/spec/initContainers")
                    .is_none(),
                "initializers untouched"
            );
        }
    }

    #[test]
    fn a_trainjob_and_other_kinds_pass_through_unchanged() {
        let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 4}}});
        let mut d = tj.clone();
        let r = inject(&mut d);
        assert_eq!(d, tj);
        assert!(!r.changed && r.templates == 0);
        assert!(r.warnings[0].contains("clustertrainingruntime torch-distributed"));
        for other in [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": pod("x")}}),
            json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}}),
            json!(null),
        ] {
            let mut d = other.clone();
            assert_eq!(inject(&mut d), DocReport::default());
            assert_eq!(d, other);
        }
    }

    #[test]
    fn injecting_twice_changes_nothing_and_uninject_restores() {
        let orig = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": pod("w")}}}});
        let mut d = orig.clone();
        assert!(inject(&mut d).changed);
        let once = d.clone();
        let r = inject(&mut d);
        assert!(!r.changed && r.templates == 1);
        assert_eq!(d, once);
        assert_eq!(uninject_document(&mut d), 1);
        assert_eq!(d, orig);
    }

    #[test]
    fn options_change_image_code_and_port() {
        let mut d = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"}, "spec": {"template": pod("w")}});
        let o = InjectOptions {
            image: "r.io/rebound:2".into(),
            exit_code: 42,
            probe_port: 19079,
        };
        inject_document(&mut d, &o, "x").expect("inject");
        let a = agent_at(&d, "/spec/template");
        assert_eq!(a["image"], "r.io/rebound:2");
        assert_eq!(
            a["restartPolicyRules"][0]["exitCodes"]["values"],
            json!([42])
        );
        assert_eq!(a["startupProbe"]["httpGet"]["port"], 19079);
        assert_eq!(a["args"], json!(["--exit-code=42", "--probe-port=19079"]));
        // A re-injection with other options updates the agent in place.
        inject(&mut d);
        let a = agent_at(&d, "/spec/template");
        assert_eq!(a["image"], DEFAULT_IMAGE);
        assert_eq!(
            a["restartPolicyRules"][0]["exitCodes"]["values"],
            json!([87])
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["initContainers"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn options_are_validated() {
        let ok = InjectOptions::default();
        assert!(ok.validate().is_ok());
        for bad in [
            InjectOptions {
                exit_code: 0,
                ..ok.clone()
            },
            InjectOptions {
                exit_code: 256,
                ..ok.clone()
            },
            InjectOptions {
                probe_port: 0,
                ..ok.clone()
            },
            InjectOptions {
                image: " ".into(),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        // The agent's own failure exits would restart the whole pod.
        for code in [1, 2, 101, 126, 127, 134, 137, 139, 143, 255] {
            let bad = InjectOptions {
                exit_code: code,
                ..ok.clone()
            };
            let err = bad.validate().expect_err("a failure exit");
            assert!(err.contains(&format!("--exit-code {code}")), "{err}");
        }
        for code in [DEFAULT_EXIT_CODE, 42, 90, 200] {
            let good = InjectOptions {
                exit_code: code,
                ..ok.clone()
            };
            assert!(good.validate().is_ok(), "{code}");
        }
    }

    #[test]
    fn refusals_name_document_and_field_and_leave_it_alone() {
        let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
            "spec": {"failurePolicy": {"restartStrategy": "InPlaceRestart"},
                     "replicatedJobs": [{"name": "w", "template": {"spec": {"template": pod("w")}}}]}});
        let mut d = js.clone();
        let e = inject_document(
            &mut d,
            &InjectOptions::default(),
            "a.yaml document 1 (JobSet s)",
        )
        .expect_err("refused");
        assert_eq!(e.field, "spec.failurePolicy.restartStrategy");
        assert!(
            e.to_string()
                .starts_with("a.yaml document 1 (JobSet s): spec.failurePolicy.restartStrategy: ")
        );
        assert_eq!(d, js);

        // The second template is refused: the first stays unwired too.
        let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"template": pod("m")},
                                             "Worker": {"template": pod(AGENT_CONTAINER)}}}});
        let mut d = pt.clone();
        let e = inject_document(&mut d, &InjectOptions::default(), "x").expect_err("refused");
        assert_eq!(
            e.field,
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name"
        );
        assert_eq!(d, pt);

        let mut missing = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
            "spec": {"tasks": [{"name": "a"}]}});
        assert_eq!(
            inject_document(&mut missing, &InjectOptions::default(), "x")
                .expect_err("no template")
                .field,
            "spec.tasks[0].template"
        );
        let mut rt = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "r"}, "spec": {"template": {"spec": {"failurePolicy": {"restartStrategy": "InPlaceRestart"}}}}});
        assert_eq!(
            inject_document(&mut rt, &InjectOptions::default(), "x")
                .expect_err("jobset in-place")
                .field,
            "spec.template.spec.failurePolicy.restartStrategy"
        );
    }
}
