//! One pod template: add (or update, or remove) the restart agent, its
//! restart rule, its startup probe (the barrier) and its environment, and
//! refuse the shapes it cannot work in (docs/in-place.md, "Wiring a job").
//!
//! Works on `serde_json::Value` so that every field rebound does not own
//! passes through untouched, whatever the job kind's API version adds.

use serde_json::{Map, Value, json};

use super::{AGENT_CONTAINER, PROBE_PATH};

/// The name of the agent's probe port (declared on the container, so a
/// real API server warns about a duplicate port and the scheduler knows
/// the port of `hostNetwork` pods). At most 15 characters.
pub const PROBE_PORT_NAME: &str = "rebound-probe";

/// What the agent of one job kind needs to know, besides the options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentTarget<'a> {
    /// `group/version/plural` of the job object the agent watches.
    pub job_api: &'a str,
    /// The pod label that names the job (read through the downward API).
    pub job_name_label: &'a str,
}

/// The agent's settings chosen on the command line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentSettings<'a> {
    /// Container image.
    pub image: &'a str,
    /// Exit code of the `RestartAllContainers` rule.
    pub exit_code: i32,
    /// Port of the startup probe.
    pub probe_port: u16,
}

/// Why a pod template cannot carry the agent: the field and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The offending field, as a path from the document root
    /// (`spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name`).
    pub field: String,
    /// What is wrong and what to do about it.
    pub reason: String,
}

fn refuse(field: impl Into<String>, reason: impl Into<String>) -> Refusal {
    Refusal {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The agent's environment: the job's API and name, the pod's namespace
/// and name (the names docs/in-place.md and `rebound restart-agent` use).
fn agent_env(t: &AgentTarget<'_>) -> Vec<Value> {
    let field = |name: &str, path: String| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    vec![
        json!({"name": "REBOUND_JOB_API", "value": t.job_api}),
        field(
            "REBOUND_JOB_NAME",
            format!("metadata.labels['{}']", t.job_name_label),
        ),
        field("POD_NAMESPACE", "metadata.namespace".into()),
        field("POD_NAME", "metadata.name".into()),
    ]
}

/// What a new agent asks for, so that it never changes the pod's QoS class
/// nor breaks its resource rules (docs/in-place.md, "The agent's
/// resources").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AgentResources {
    /// Every container limits CPU and memory: the pod is (or is meant to
    /// be) Guaranteed QoS, which GPU pods need for exclusive CPUs and NUMA
    /// alignment; one container without limits would make it Burstable,
    /// so the agent asks for requests equal to limits.
    Guaranteed,
    /// Some container requests or limits something: small requests and a
    /// memory limit (the pod stays Burstable).
    Burstable,
    /// None at all: the pod sets pod-level resources (`spec.resources`:
    /// the agent shares the pod's budget; requests of its own could push
    /// the containers' sum over the pod's, which the API server refuses),
    /// or no container requests or limits anything (BestEffort: requests
    /// would make the pod Burstable).
    Shared,
}

impl AgentResources {
    /// What a pod spec (a template's or a pod's) calls for.
    pub(crate) fn of(spec: &Value) -> AgentResources {
        let pod_level = ["requests", "limits"].iter().any(|k| {
            spec["resources"][*k]
                .as_object()
                .is_some_and(|m| !m.is_empty())
        });
        let containers: Vec<&Value> = ["containers", "initContainers"]
            .iter()
            .filter_map(|k| spec[*k].as_array())
            .flatten()
            .filter(|c| name_of(c) != Some(AGENT_CONTAINER))
            .collect();
        let sets_any = |c: &&Value| {
            ["requests", "limits"].iter().any(|k| {
                c["resources"][*k]
                    .as_object()
                    .is_some_and(|m| !m.is_empty())
            })
        };
        if pod_level || !containers.iter().any(sets_any) {
            AgentResources::Shared
        } else if containers.iter().all(|c| has_cpu_and_memory_limits(c)) {
            AgentResources::Guaranteed
        } else {
            AgentResources::Burstable
        }
    }
}

/// Resources of a new agent (see [`AgentResources`]).
fn agent_resources(r: AgentResources) -> Value {
    match r {
        AgentResources::Guaranteed => {
            json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "50m", "memory": "64Mi"}})
        }
        AgentResources::Burstable => {
            json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}})
        }
        AgentResources::Shared => json!({}),
    }
}

/// The agent runs as the image's non-root user with nothing else, so that
/// namespaces enforcing the `restricted` Pod Security level accept it,
/// whatever the training containers need.
fn agent_security_context() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// The fields rebound owns on the agent container: always set to these
/// values (an older injection is updated). Everything else on an existing
/// agent (resources, securityContext, volume mounts, ...) is kept.
fn owned_fields(s: &AgentSettings<'_>) -> Map<String, Value> {
    let v = json!({
        "image": s.image,
        "command": ["rebound", "restart-agent"],
        "args": [format!("--exit-code={}", s.exit_code), format!("--probe-port={}", s.probe_port)],
        "restartPolicy": "Always",
        "restartPolicyRules": [
            {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [s.exit_code]}},
        ],
        "startupProbe": {
            "httpGet": {"path": PROBE_PATH, "port": s.probe_port},
            "periodSeconds": 1,
            "failureThreshold": 86400,
        },
        "ports": [{"name": PROBE_PORT_NAME, "containerPort": s.probe_port, "protocol": "TCP"}],
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The agent container as a pod gets it when it has none: the fields
/// rebound owns, its environment, and the resources and security context a
/// new agent starts with. `rebound inject` builds the same container field
/// by field in [`wire`] (keeping what a user changed on an existing
/// agent); the admission policy ([`super::admission`]) is generated from
/// this, so both wirings give a pod the same agent.
pub(crate) fn new_agent(t: &AgentTarget<'_>, s: &AgentSettings<'_>, r: AgentResources) -> Value {
    let mut agent = Map::new();
    agent.insert("name".into(), json!(AGENT_CONTAINER));
    agent.extend(owned_fields(s));
    merge_env(&mut agent, &agent_env(t));
    agent.insert("resources".into(), agent_resources(r));
    agent.insert("securityContext".into(), agent_security_context());
    Value::Object(agent)
}

/// A list field of the pod spec: absent is empty, anything but a list is
/// refused.
fn list<'a>(spec: &'a Value, key: &str, at: &str) -> Result<&'a [Value], Refusal> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(refuse(format!("{at}.{key}"), "must be a list")),
    }
}

fn name_of(c: &Value) -> Option<&str> {
    c.get("name").and_then(Value::as_str)
}

fn has_cpu_and_memory_limits(c: &Value) -> bool {
    let l = &c["resources"]["limits"];
    !l["cpu"].is_null() && !l["memory"].is_null()
}

/// Checks of the pod spec at `at` (`....template.spec`) against the agent.
fn check(spec: &Value, at: &str, s: &AgentSettings<'_>) -> Result<(), Refusal> {
    if !spec.is_object() {
        return Err(refuse(at, "must be a pod spec (an object)"));
    }
    let containers = list(spec, "containers", at)?;
    if containers.is_empty() {
        return Err(refuse(
            format!("{at}.containers"),
            "the pod template has no containers",
        ));
    }
    if spec["os"]["name"].as_str() == Some("windows") {
        return Err(refuse(
            format!("{at}.os.name"),
            "the restart agent's image runs on Linux only",
        ));
    }
    let init = list(spec, "initContainers", at)?;
    for (i, c) in containers.iter().enumerate() {
        if name_of(c) == Some(AGENT_CONTAINER) {
            return Err(refuse(
                format!("{at}.containers[{i}].name"),
                format!(
                    "a regular container is named {AGENT_CONTAINER}; that name belongs to the agent, an init container (rename the container)"
                ),
            ));
        }
    }
    for (key, list) in [("containers", containers), ("initContainers", init)] {
        for (i, c) in list.iter().enumerate() {
            if name_of(c) == Some(AGENT_CONTAINER) {
                continue;
            }
            let ports = match c.get("ports") {
                None | Some(Value::Null) => &[][..],
                Some(Value::Array(p)) => p,
                Some(_) => {
                    return Err(refuse(format!("{at}.{key}[{i}].ports"), "must be a list"));
                }
            };
            for (j, p) in ports.iter().enumerate() {
                if p["containerPort"].as_u64() == Some(u64::from(s.probe_port)) {
                    return Err(refuse(
                        format!("{at}.{key}[{i}].ports[{j}].containerPort"),
                        format!(
                            "{} is the agent's probe port and the pod's containers share one network namespace; choose another with --probe-port",
                            s.probe_port
                        ),
                    ));
                }
                if p["name"].as_str() == Some(PROBE_PORT_NAME) {
                    return Err(refuse(
                        format!("{at}.{key}[{i}].ports[{j}].name"),
                        format!(
                            "the port name {PROBE_PORT_NAME} belongs to the agent (port names are unique in a pod)"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What wiring one template did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct TemplateChange {
    /// The template differs from before.
    pub changed: bool,
    /// Things the user should know (the template is still wired).
    pub warnings: Vec<String>,
}

/// Add or update the agent in the pod template `tpl` (a `PodTemplateSpec`:
/// `{metadata, spec}`) found at `at`.
pub(crate) fn wire(
    tpl: &mut Value,
    at: &str,
    target: &AgentTarget<'_>,
    s: &AgentSettings<'_>,
) -> Result<TemplateChange, Refusal> {
    if !tpl.is_object() {
        return Err(refuse(
            at,
            "must be a pod template (an object with metadata and spec)",
        ));
    }
    let spec_at = format!("{at}.spec");
    check(&tpl["spec"], &spec_at, s)?;
    let before = tpl.clone();
    let mut warnings = Vec::new();
    let spec = &mut tpl["spec"];
    if spec["hostNetwork"].as_bool() == Some(true) {
        warnings.push(format!(
            "{spec_at}.hostNetwork: the agent's probe port {} is a port of the node: at most one such pod per node, and no other process there may use it",
            s.probe_port
        ));
    }
    list(spec, "containers", &spec_at)?;
    list(spec, "initContainers", &spec_at)?;
    let resources = AgentResources::of(spec);
    if spec.get("initContainers").is_none_or(Value::is_null) {
        spec["initContainers"] = json!([]);
    }
    let Some(init) = spec["initContainers"].as_array_mut() else {
        return Err(refuse(
            format!("{spec_at}.initContainers"),
            "must be a list",
        ));
    };
    let idx = match init
        .iter()
        .position(|c| name_of(c) == Some(AGENT_CONTAINER))
    {
        Some(i) => i,
        None => {
            init.push(json!({"name": AGENT_CONTAINER}));
            init.len() - 1
        }
    };
    let Some(agent) = init[idx].as_object_mut() else {
        return Err(refuse(
            format!("{spec_at}.initContainers[{idx}]"),
            "must be a container (an object)",
        ));
    };
    for (k, v) in owned_fields(s) {
        agent.insert(k, v);
    }
    merge_env(agent, &agent_env(target));
    agent
        .entry("resources")
        .or_insert_with(|| agent_resources(resources));
    agent
        .entry("securityContext")
        .or_insert_with(agent_security_context);
    Ok(TemplateChange {
        changed: *tpl != before,
        warnings,
    })
}

/// Set the agent's variables, keeping others the user added (in order).
fn merge_env(agent: &mut Map<String, Value>, ours: &[Value]) {
    let mut env: Vec<Value> = match agent.remove("env") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    for var in ours {
        match env.iter_mut().find(|e| name_of(e) == name_of(var)) {
            Some(slot) => *slot = var.clone(),
            None => env.push(var.clone()),
        }
    }
    agent.insert("env".into(), Value::Array(env));
}

/// Remove the agent from the pod template `tpl`; true if there was one.
/// An `initContainers` list left empty is removed too.
pub(crate) fn unwire(tpl: &mut Value) -> bool {
    let spec = &mut tpl["spec"];
    let Some(init) = spec.get_mut("initContainers").and_then(Value::as_array_mut) else {
        return false;
    };
    let n = init.len();
    init.retain(|c| name_of(c) != Some(AGENT_CONTAINER));
    let removed = init.len() != n;
    if removed
        && init.is_empty()
        && let Some(m) = spec.as_object_mut()
    {
        m.remove("initContainers");
    }
    removed
}

#[cfg(test)]
mod tests;
