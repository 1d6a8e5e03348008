//! Wiring at admission: a `MutatingAdmissionPolicy` (CEL, run by the API
//! server itself, no webhook server to deploy) that adds the restart agent
//! to the pods of opted-in jobs when they are created, whatever operator
//! creates them. Several job CRDs (Kubeflow training-operator v1.9, Trainer
//! v2's runtimes) prune or refuse `restartPolicyRules` in their pod
//! templates, so `rebound inject` cannot wire them; pods know the field
//! (Kubernetes 1.36), so the policy wires the pods (docs/in-place.md,
//! "Wiring at admission").
//!
//! The agent container is [`inject_pod::new_agent`], the one `rebound
//! inject` adds, turned into a CEL object literal: the two wirings cannot
//! drift apart. What differs per pod is computed in CEL: which job the pod
//! belongs to (the job-name label of its operator, and for Kubeflow the
//! kind of its controller), and whether its other containers all limit CPU
//! and memory (then the agent's requests equal its limits, as `rebound
//! inject` does, so a Guaranteed pod stays Guaranteed).
//!
//! Why JSONPatch: the restart rules are an atomic list, and a real
//! kube-apiserver 1.36 refuses an `ApplyConfiguration` mutation of an
//! atomic list ("may not mutate atomic arrays"). The agent is appended to
//! `spec.initContainers` (created first when absent), so the job's own init
//! containers run before the barrier. CEL object construction is typed
//! (`Object.spec.initContainers{...}`): the server refuses untyped maps of
//! mixed values, and (v1.36.2) panics converting a list built by a
//! `map()` macro, hence the two-patch form.

use serde_json::{Value, json};

use super::AGENT_CONTAINER;
use super::inject::{
    BATCH_JOB_NAME_LABEL, InjectOptions, JOBSET_NAME_LABEL, KUBEFLOW_JOB_NAME_LABEL,
    KUBEFLOW_KINDS, VOLCANO_JOB_NAME_LABEL,
};
use super::inject_pod::{self, AgentResources, AgentSettings, AgentTarget, PROBE_PORT_NAME};
use crate::fault::wire::KCOVER_OPT_IN;

/// The name of the policy and of its binding (cluster-scoped objects).
pub const POLICY_NAME: &str = "rebound-restart-agent";

/// The match condition that leaves `hostNetwork` pods unwired.
pub const HOST_NETWORK_CONDITION: &str = "not-on-the-host-network";

/// The variable the policy adds to the agent's environment (the agent
/// ignores it): it tells the controller, which sees the pod, that the
/// admission policy wired this pod, for `explain` and Events.
pub const WIRED_BY_ENV: &str = "REBOUND_WIRED_BY";
/// [`WIRED_BY_ENV`]'s value.
pub const WIRED_BY_ADMISSION: &str = "admission-policy";

/// The CEL type of an init container, for object construction.
const CONTAINER_TYPE: &str = "Object.spec.initContainers";

/// Marks a place in a string of the agent's JSON where a CEL variable of
/// the policy goes (`\u{1}name\u{1}`).
const MARK: char = '\u{1}';

/// Why the policy cannot be generated.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The agent's settings are unusable (the same checks as `rebound
    /// inject`'s).
    #[error("{0}")]
    Options(String),
    /// A value of the agent container has no CEL literal (a float, say).
    #[error("the agent container's field {0} has no CEL literal form")]
    Literal(String),
}

/// A CEL string literal (double quotes; also what Go's `%q`, Helm's
/// `quote`, gives for plain strings, which the chart relies on to replace
/// the image).
pub fn cel_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A string of the agent's JSON as CEL: a literal, or a concatenation where
/// it carries [`MARK`]ed variables.
fn cel_text(s: &str) -> String {
    if !s.contains(MARK) {
        return cel_string(s);
    }
    let parts: Vec<String> = s
        .split(MARK)
        .enumerate()
        .filter(|(_, p)| !p.is_empty())
        .map(|(i, p)| {
            if i % 2 == 1 {
                format!("variables.{p}")
            } else {
                cel_string(p)
            }
        })
        .collect();
    parts.join(" + ")
}

/// Fields of a container that are maps (string to quantity), not objects.
fn is_map_field(ty: &str) -> bool {
    ty.ends_with(".limits") || ty.ends_with(".requests")
}

/// `v` (a part of a container at CEL type `ty`) as a typed CEL literal;
/// `overrides` replace the value at a type path with a CEL expression.
fn typed(v: &Value, ty: &str, overrides: &[(String, String)]) -> Result<String, AdmissionError> {
    if let Some((_, cel)) = overrides.iter().find(|(t, _)| t == ty) {
        return Ok(cel.clone());
    }
    Ok(match v {
        Value::String(s) => cel_text(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => return Err(AdmissionError::Literal(ty.to_owned())),
        },
        Value::Array(a) => {
            let items: Result<Vec<String>, _> = a.iter().map(|e| typed(e, ty, overrides)).collect();
            format!("[{}]", items?.join(", "))
        }
        Value::Object(m) if is_map_field(ty) => {
            let items: Result<Vec<String>, _> = m
                .iter()
                .map(|(k, e)| Ok(format!("{}: {}", cel_string(k), typed(e, ty, overrides)?)))
                .collect();
            format!("{{{}}}", items?.join(", "))
        }
        Value::Object(m) => {
            let items: Result<Vec<String>, _> = m
                .iter()
                .map(|(k, e)| {
                    Ok(format!(
                        "{k}: {}",
                        typed(e, &format!("{ty}.{k}"), overrides)?
                    ))
                })
                .collect();
            // The container's own fields one per line (readable in the
            // generated YAML); nested objects on one line.
            let sep = if ty == CONTAINER_TYPE { ",\n  " } else { ", " };
            format!("{ty}{{{}}}", items?.join(sep))
        }
        Value::Null => return Err(AdmissionError::Literal(ty.to_owned())),
    })
}

/// One job kind the policy recognises on a pod: the CEL condition (over
/// `labels`, the pod's labels, and `object`), the job's API resource as a
/// CEL expression, and the label that names the job.
struct PodKind {
    /// The condition, self-contained (match conditions see no variables).
    when: String,
    /// The same with the policy's variables (`variables.kubeflowJobs`).
    when_var: String,
    api: String,
    label: &'static str,
}

/// The job kinds, in the order they are tried: JobSet before batch Job
/// (a JobSet's pods carry the batch Job labels of its child Jobs too).
/// TrainJob pods are JobSet pods (the TrainJob's JobSet has its name): the
/// agent then follows the JobSet's controller, the TrainJob
/// ([`super::agent`]).
fn pod_kinds(labels: &str) -> Vec<PodKind> {
    let has = |l: &str| format!("'{l}' in {labels}");
    vec![
        PodKind {
            when: has(VOLCANO_JOB_NAME_LABEL),
            when_var: has(VOLCANO_JOB_NAME_LABEL),
            api: "'batch.volcano.sh/v1alpha1/jobs'".into(),
            label: VOLCANO_JOB_NAME_LABEL,
        },
        PodKind {
            when: has(JOBSET_NAME_LABEL),
            when_var: has(JOBSET_NAME_LABEL),
            api: "'jobset.x-k8s.io/v1alpha2/jobsets'".into(),
            label: JOBSET_NAME_LABEL,
        },
        PodKind {
            when: format!(
                "{} && has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, {})",
                has(KUBEFLOW_JOB_NAME_LABEL),
                kubeflow_owner("o")
            ),
            when_var: format!(
                "{} && size(variables.kubeflowJobs) > 0",
                has(KUBEFLOW_JOB_NAME_LABEL)
            ),
            api: "variables.kubeflowJobs[0]".into(),
            label: KUBEFLOW_JOB_NAME_LABEL,
        },
        PodKind {
            when: has(BATCH_JOB_NAME_LABEL),
            when_var: has(BATCH_JOB_NAME_LABEL),
            api: "'batch/v1/jobs'".into(),
            label: BATCH_JOB_NAME_LABEL,
        },
    ]
}

/// `{'PyTorchJob': 'pytorchjobs', ...}`: Kubeflow v1 kinds to plurals.
fn kubeflow_plurals() -> String {
    let pairs: Vec<String> = KUBEFLOW_KINDS
        .iter()
        .map(|(k, p, _)| format!("'{k}': '{p}'"))
        .collect();
    format!("{{{}}}", pairs.join(", "))
}

/// The pod's controller is a Kubeflow v1 job (the operator names the job
/// in a label; the kind is the owner's).
fn kubeflow_owner(o: &str) -> String {
    format!(
        "has({o}.controller) && {o}.controller && {o}.apiVersion.startsWith('kubeflow.org/') && {o}.kind in {}",
        kubeflow_plurals()
    )
}

/// `cond1 ? v1 : cond2 ? v2 : ... : ''`.
fn chain(kinds: &[PodKind], value: impl Fn(&PodKind) -> String) -> String {
    let mut s = String::new();
    for k in kinds {
        s.push_str(&format!("{} ? {} :\n", k.when_var, value(k)));
    }
    s.push_str("''");
    s
}

/// Every container of the pod (`containers` or `initContainers`) limits
/// CPU and memory: the condition under which [`inject_pod`] gives the
/// agent requests equal to limits.
fn all_limited(list: &str) -> String {
    format!(
        "object.spec.{list}.all(c, has(c.resources) && has(c.resources.limits) && 'cpu' in c.resources.limits && 'memory' in c.resources.limits)"
    )
}

/// Some container of `list` requests or limits something.
fn sets_resources(list: &str) -> String {
    format!(
        "object.spec.{list}.exists(c, has(c.resources) && ((has(c.resources.requests) && size(c.resources.requests) > 0) || (has(c.resources.limits) && size(c.resources.limits) > 0)))"
    )
}

/// No container of `list` uses the probe port or its name.
fn port_free(list: &str, port: u16) -> String {
    format!(
        "object.spec.{list}.exists(c, has(c.ports) && c.ports.exists(p, p.containerPort == {port} || (has(p.name) && p.name == '{PROBE_PORT_NAME}')))"
    )
}

/// The agent container as the mutation's CEL expression.
fn agent_cel(opts: &InjectOptions) -> Result<String, AdmissionError> {
    let api = format!("{MARK}jobApi{MARK}");
    let label = format!("{MARK}jobNameLabel{MARK}");
    let target = AgentTarget {
        job_api: &api,
        job_name_label: &label,
    };
    let s = AgentSettings {
        image: &opts.image,
        exit_code: opts.exit_code,
        probe_port: opts.probe_port,
    };
    let mut agent = inject_pod::new_agent(&target, &s, AgentResources::Burstable);
    if let Some(env) = agent["env"].as_array_mut() {
        env.push(json!({"name": WIRED_BY_ENV, "value": WIRED_BY_ADMISSION}));
    }
    let res_ty = format!("{CONTAINER_TYPE}.resources");
    let of = |r| {
        typed(
            &inject_pod::new_agent(&target, &s, r)["resources"],
            &res_ty,
            &[],
        )
    };
    let (limited, shared) = (of(AgentResources::Guaranteed)?, of(AgentResources::Shared)?);
    let unlimited = typed(&agent["resources"], &res_ty, &[])?;
    let overrides = [(
        res_ty,
        format!("(variables.shared ? {shared} : variables.guaranteed ? {limited} : {unlimited})"),
    )];
    typed(&agent, CONTAINER_TYPE, &overrides)
}

/// `rebound admission-policy` flags: the agent's settings, as `rebound
/// inject` takes them.
#[derive(clap::Args, Debug, Clone)]
pub struct AdmissionPolicyArgs {
    /// The agent's image (the rebound image; `rebound restart-agent` runs
    /// in it).
    #[arg(long, default_value = super::inject::DEFAULT_IMAGE, env = "REBOUND_INJECT_IMAGE")]
    pub image: String,
    /// Exit code of the agent that the pods' `RestartAllContainers` rule
    /// matches (as `rebound inject --exit-code`).
    #[arg(long, default_value_t = super::DEFAULT_EXIT_CODE)]
    pub exit_code: i32,
    /// Port of the agent's `/barrier` startup probe; pods that use it
    /// already are not wired.
    #[arg(long, default_value_t = super::DEFAULT_PROBE_PORT)]
    pub probe_port: u16,
}

impl AdmissionPolicyArgs {
    /// The policy these flags ask for.
    pub fn yaml(&self) -> Result<String, AdmissionError> {
        policy_yaml(&InjectOptions {
            image: self.image.clone(),
            exit_code: self.exit_code,
            probe_port: self.probe_port,
        })
    }
}

/// Indents every line of `text` by `n` spaces (a YAML block scalar).
fn block(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines()
        .map(|l| format!("{pad}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `MutatingAdmissionPolicy` and its binding, as one YAML stream
/// (what `rebound admission-policy` prints and `config/admission/` and the
/// chart hold).
pub fn policy_yaml(opts: &InjectOptions) -> Result<String, AdmissionError> {
    opts.validate().map_err(AdmissionError::Options)?;
    let port = opts.probe_port;
    let labels = "object.metadata.labels";
    let kinds = pod_kinds(labels);
    let known = kinds
        .iter()
        .map(|k| format!("({})", k.when))
        .collect::<Vec<_>>()
        .join(" ||\n");
    let conditions = [
        (
            "job-of-a-known-kind",
            format!("has(object.metadata.labels) && (\n{known})"),
        ),
        (
            "not-wired-yet",
            format!(
                "!has(object.spec.initContainers) ||\n!object.spec.initContainers.exists(c, c.name == '{AGENT_CONTAINER}')"
            ),
        ),
        (
            "no-container-named-like-the-agent",
            format!("!object.spec.containers.exists(c, c.name == '{AGENT_CONTAINER}')"),
        ),
        (
            "probe-port-free",
            format!(
                "!{} &&\n(!has(object.spec.initContainers) || !{})",
                port_free("containers", port),
                port_free("initContainers", port)
            ),
        ),
        (
            "linux",
            "!has(object.spec.os) || object.spec.os.name != 'windows'".to_string(),
        ),
        (
            // On the node's network the probe port is the node's: a second
            // wired pod there could not start its agent (`rebound inject`
            // warns and wires; the policy, which nobody reads, does not).
            HOST_NETWORK_CONDITION,
            "!has(object.spec.hostNetwork) || !object.spec.hostNetwork".to_string(),
        ),
    ];
    let variables = [
        (
            "kubeflowJobs",
            format!(
                "has(object.metadata.ownerReferences) ?\n  object.metadata.ownerReferences.filter(o, {})\n    .map(o, o.apiVersion + '/' + {}[o.kind]) :\n  []",
                kubeflow_owner("o"),
                kubeflow_plurals()
            ),
        ),
        ("jobApi", chain(&kinds, |k| k.api.clone())),
        ("jobNameLabel", chain(&kinds, |k| format!("'{}'", k.label))),
        (
            // Pod-level resources, or BestEffort: the agent asks for none
            // (inject_pod::AgentResources::Shared).
            "shared",
            format!(
                "(has(object.spec.resources) && ((has(object.spec.resources.requests) && size(object.spec.resources.requests) > 0) ||\n  (has(object.spec.resources.limits) && size(object.spec.resources.limits) > 0))) ||\n!({} ||\n  (has(object.spec.initContainers) && {}))",
                sets_resources("containers"),
                sets_resources("initContainers")
            ),
        ),
        (
            "guaranteed",
            format!(
                "{} &&\n(!has(object.spec.initContainers) || {})",
                all_limited("containers"),
                all_limited("initContainers")
            ),
        ),
    ];
    let mutation = format!(
        "(has(object.spec.initContainers) ? [] :\n  [JSONPatch{{op: \"add\", path: \"/spec/initContainers\", value: []}}]) +\n[JSONPatch{{op: \"add\", path: \"/spec/initContainers/-\", value:\n  {}}}]",
        agent_cel(opts)?
    );
    let mut y = String::new();
    y.push_str(&format!(
        "# Generated by `rebound admission-policy` from the code (crates/rebound/src/inplace/admission.rs);\n\
         # do not edit: a test compares it with the code. docs/in-place.md, \"Wiring at admission\".\n\
         apiVersion: admissionregistration.k8s.io/v1\n\
         kind: MutatingAdmissionPolicy\n\
         metadata:\n  name: {POLICY_NAME}\n  labels:\n    app.kubernetes.io/name: rebound\n\
         spec:\n\
         \x20 # A policy that cannot be evaluated must never keep a pod from being created:\n\
         \x20 # the pod is then created unwired, and rebound recreates it instead (and says why).\n\
         \x20 failurePolicy: Ignore\n\
         \x20 reinvocationPolicy: IfNeeded\n\
         \x20 matchConstraints:\n\
         \x20   resourceRules:\n\
         \x20   - apiGroups: [\"\"]\n\
         \x20     apiVersions: [\"v1\"]\n\
         \x20     operations: [\"CREATE\"]\n\
         \x20     resources: [\"pods\"]\n\
         \x20   # Opted-in pods only (the label their job's operator copies from the pod template).\n\
         \x20   objectSelector:\n\
         \x20     matchLabels:\n\
         \x20       {KCOVER_OPT_IN}: \"true\"\n\
         \x20 matchConditions:\n"
    ));
    for (name, expr) in &conditions {
        y.push_str(&format!(
            "  - name: {name}\n    expression: |-\n{}\n",
            block(expr, 6)
        ));
    }
    y.push_str("  variables:\n");
    for (name, expr) in &variables {
        y.push_str(&format!(
            "  - name: {name}\n    expression: |-\n{}\n",
            block(expr, 6)
        ));
    }
    y.push_str(&format!(
        "  mutations:\n  - patchType: JSONPatch\n    jsonPatch:\n      expression: |-\n{}\n",
        block(&mutation, 8)
    ));
    y.push_str(&format!(
        "---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\n\
         metadata:\n  name: {POLICY_NAME}\n  labels:\n    app.kubernetes.io/name: rebound\n\
         spec:\n  policyName: {POLICY_NAME}\n"
    ));
    Ok(y)
}

#[cfg(test)]
mod tests;
