//! What the simulated kubelet reads from a pod's spec: its containers in
//! start order, their restart policies and restart rules (KEP-5307, with
//! the `RestartAllContainers` action of KEP-5532), probes, and the restart
//! agent's wiring. Read from the pod's JSON, since the typed `Pod` of the
//! oldest Kubernetes version this project builds for has no
//! `restartPolicyRules`.
//!
//! The decision what a container's exit leads to follows the real
//! kubelet: `ShouldAllContainersRestart` (any container whose exit code a
//! `RestartAllContainers` rule matches restarts the whole pod) and
//! `podutil.ContainerShouldRestart` (the first matching rule with action
//! `Restart`, else the container's own restart policy, else the pod's).

use std::time::Duration;

use serde_json::Value;

use rebound::inplace::AGENT_CONTAINER;
use rebound::inplace::agent::JobRef;
use rebound::inplace::restart_agent::RestartAgentArgs;

/// The restart rule action that restarts every container of the pod.
pub(crate) const RESTART_ALL: &str = "RestartAllContainers";

/// Where a container sits in the pod's start sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular init container: runs to completion before the next.
    Init,
    /// An init container with `restartPolicy: Always` (native sidecar,
    /// KEP-753): runs beside the others; the next container starts once
    /// its startup probe succeeded.
    Sidecar,
    /// A container of `spec.containers`.
    Regular,
}

/// One entry of `restartPolicyRules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    /// `Restart` or `RestartAllContainers`.
    pub action: String,
    /// `In` or `NotIn`.
    pub operator: String,
    /// The exit codes.
    pub values: Vec<i32>,
}

/// The in-process restart agent of a container recognised as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentWiring {
    /// The job it follows.
    pub job: JobRef,
    /// Its flags, as the real binary would read them.
    pub args: RestartAgentArgs,
}

/// What the kubelet needs of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerSpec {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Where it starts.
    pub kind: Kind,
    /// The container-level `restartPolicy`, if set.
    pub restart_policy: Option<String>,
    /// Its `restartPolicyRules`, in order.
    pub rules: Vec<Rule>,
    /// Has a startup probe (`started` waits for it).
    pub startup_probe: bool,
    /// Has a readiness probe (`ready` waits for it).
    pub readiness_probe: bool,
    /// `Some` when this container runs `rebound restart-agent`: its wiring,
    /// or why the real binary would refuse to start (it then exits at
    /// once with code 2, as clap does).
    pub agent: Option<Result<AgentWiring, String>>,
}

/// What the kubelet needs of a pod's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodSpecView {
    /// The pod's `restartPolicy` (default `Always`).
    pub restart_policy: String,
    /// Init containers, in order.
    pub init: Vec<ContainerSpec>,
    /// Regular containers.
    pub main: Vec<ContainerSpec>,
    /// `terminationGracePeriodSeconds` (default 30 s).
    pub grace: Duration,
}

/// What a container's exit leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnExit {
    /// Restart every container of the pod in place.
    RestartAll,
    /// Restart this container.
    Restart,
    /// Leave it terminated (a regular init container that succeeded is
    /// done; one that failed fails the pod).
    Stay,
}

impl PodSpecView {
    /// Whether any container carries a `RestartAllContainers` rule: only
    /// such pods get the `AllContainersRestarting` condition, as from the
    /// real kubelet (`podutil.AllContainersCouldRestart`).
    pub(crate) fn could_restart_all(&self) -> bool {
        self.init
            .iter()
            .chain(&self.main)
            .any(|c| c.rules.iter().any(|r| r.action == RESTART_ALL))
    }

    /// Whether the pod has init containers (then waiting containers say
    /// `PodInitializing`, else `ContainerCreating`).
    pub(crate) fn waiting_reason(&self) -> &'static str {
        if self.init.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        }
    }
}

impl ContainerSpec {
    /// The first rule whose exit codes match (`findMatchingContainerRestartRule`).
    pub(crate) fn matching_rule(&self, code: i32) -> Option<&Rule> {
        self.rules.iter().find(|r| match r.operator.as_str() {
            "In" => r.values.contains(&code),
            "NotIn" => !r.values.contains(&code),
            _ => false,
        })
    }

    /// What exiting with `code` leads to, under the pod's restart policy.
    pub(crate) fn on_exit(&self, pod_policy: &str, code: i32) -> OnExit {
        if let Some(rule) = self.matching_rule(code) {
            match rule.action.as_str() {
                RESTART_ALL => return OnExit::RestartAll,
                // Rules act only with a container-level policy set (the
                // API requires one beside rules).
                "Restart" if self.restart_policy.is_some() => return OnExit::Restart,
                _ => {}
            }
        }
        let policy = self.restart_policy.as_deref().unwrap_or(pod_policy);
        let restart = match (self.kind, policy) {
            // A regular init container that succeeded is done, whatever
            // the policy; one that failed is retried unless Never.
            (Kind::Init, _) if code == 0 => false,
            (_, "Never") => false,
            (_, "OnFailure") => code != 0,
            _ => true,
        };
        if restart {
            OnExit::Restart
        } else {
            OnExit::Stay
        }
    }
}

/// Reads a pod's spec (the pod as JSON).
pub(crate) fn parse_pod(pod: &Value) -> PodSpecView {
    let spec = &pod["spec"];
    let restart_policy = spec["restartPolicy"]
        .as_str()
        .unwrap_or("Always")
        .to_owned();
    let list = |key: &str, init: bool| -> Vec<ContainerSpec> {
        spec[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| container(pod, c, init))
            .collect()
    };
    PodSpecView {
        restart_policy,
        init: list("initContainers", true),
        main: list("containers", false),
        grace: Duration::from_secs(spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30)),
    }
}

fn container(pod: &Value, c: &Value, init: bool) -> ContainerSpec {
    let restart_policy = c["restartPolicy"].as_str().map(str::to_owned);
    let kind = match (init, restart_policy.as_deref()) {
        (true, Some("Always")) => Kind::Sidecar,
        (true, _) => Kind::Init,
        (false, _) => Kind::Regular,
    };
    let rules = c["restartPolicyRules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Rule {
            action: r["action"].as_str().unwrap_or_default().to_owned(),
            operator: r["exitCodes"]["operator"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            values: r["exitCodes"]["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64)
                .filter_map(|v| i32::try_from(v).ok())
                .collect(),
        })
        .collect();
    let name = c["name"].as_str().unwrap_or_default().to_owned();
    let env = resolve_env(pod, c);
    let argv: Vec<String> = ["command", "args"]
        .iter()
        .flat_map(|k| c[*k].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(|s| expand(s, &env)))
        .collect();
    let is_agent = name == AGENT_CONTAINER || argv.iter().any(|a| a == "restart-agent");
    let agent = is_agent.then(|| {
        let args = RestartAgentArgs::from_container(&argv, &env)?;
        let job = args.job().map_err(|e| e.to_string())?;
        Ok(AgentWiring { job, args })
    });
    ContainerSpec {
        name,
        image: c["image"].as_str().unwrap_or_default().to_owned(),
        kind,
        restart_policy,
        rules,
        startup_probe: c["startupProbe"].is_object(),
        readiness_probe: c["readinessProbe"].is_object(),
        agent,
    }
}

/// A container's environment as the kubelet resolves it: literal values,
/// `$(VAR)` references to earlier variables, and the downward API fields
/// of the pod's metadata (`metadata.name`, `.namespace`, `.uid`,
/// `.labels['k']`, `.annotations['k']`) and `spec.nodeName`.
fn resolve_env(pod: &Value, c: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let value = if let Some(v) = e["value"].as_str() {
            Some(expand(v, &out))
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field(pod, path)
        } else {
            None
        };
        if let Some(v) = value {
            out.push((name.to_owned(), v));
        }
    }
    out
}

fn field(pod: &Value, path: &str) -> Option<String> {
    let md = &pod["metadata"];
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)?
            .strip_suffix("']")
            .map(str::to_owned)
    };
    let v = match path {
        "metadata.name" => md["name"].as_str(),
        "metadata.namespace" => md["namespace"].as_str(),
        "metadata.uid" => md["uid"].as_str(),
        "spec.nodeName" => pod["spec"]["nodeName"].as_str(),
        _ => {
            if let Some(k) = keyed("metadata.labels['") {
                return md["labels"][k.as_str()].as_str().map(str::to_owned);
            }
            if let Some(k) = keyed("metadata.annotations['") {
                return md["annotations"][k.as_str()].as_str().map(str::to_owned);
            }
            None
        }
    };
    v.map(str::to_owned)
}

/// `$(VAR)` expansion as the kubelet does it for commands, arguments and
/// values (`$$` escapes; unknown references stay as written).
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
        {
            let var = &body[..end];
            match env.iter().rev().find(|(k, _)| k == var) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(var);
                    out.push(')');
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod wired as docs/in-place.md says, plus a regular init container.
    pub(crate) fn wired_pod() -> Value {
        json!({
            "metadata": {"name": "train-worker-0", "namespace": "ml", "uid": "u1",
                         "labels": {"training.kubeflow.org/job-name": "train"}},
            "spec": {
                "restartPolicy": "Never",
                "initContainers": [
                    {"name": "setup", "image": "busybox"},
                    {"name": AGENT_CONTAINER, "image": "rebound:dev",
                     "command": ["rebound", "restart-agent"],
                     "args": ["--job-name=$(JOB)"],
                     "restartPolicy": "Always",
                     "restartPolicyRules": [{"action": RESTART_ALL,
                                             "exitCodes": {"operator": "In", "values": [87]}}],
                     "startupProbe": {"httpGet": {"path": "/barrier", "port": 9079}},
                     "env": [
                         {"name": "REBOUND_JOB_API", "value": "kubeflow.org/v1/pytorchjobs"},
                         {"name": "JOB", "valueFrom": {"fieldRef": {
                             "fieldPath": "metadata.labels['training.kubeflow.org/job-name']"}}},
                         {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                     ]},
                ],
                "containers": [{"name": "pytorch", "image": "trainer",
                                "readinessProbe": {"exec": {"command": ["true"]}}}],
            },
        })
    }

    #[test]
    fn the_wired_pod_is_read_with_its_agent() {
        let p = parse_pod(&wired_pod());
        assert_eq!(p.restart_policy, "Never");
        assert_eq!(
            p.init.iter().map(|c| c.kind).collect::<Vec<_>>(),
            vec![Kind::Init, Kind::Sidecar]
        );
        assert!(p.could_restart_all());
        assert_eq!(p.waiting_reason(), "PodInitializing");
        let agent = p.init[1].agent.clone().expect("recognised").expect("wired");
        assert_eq!(agent.job.name, "train", "from the label, through $(JOB)");
        assert_eq!(agent.job.namespace, "ml");
        assert_eq!(agent.job.plural, "pytorchjobs");
        assert_eq!(agent.args.exit_code, rebound::inplace::DEFAULT_EXIT_CODE);
        assert!(p.init[1].startup_probe && !p.init[1].readiness_probe);
        assert!(p.main[0].readiness_probe && p.main[0].agent.is_none());
        assert_eq!(p.grace, Duration::from_secs(30));
    }

    #[test]
    fn an_agent_without_its_wiring_is_recognised_and_refused() {
        let mut pod = wired_pod();
        pod["spec"]["initContainers"][1]["env"] = json!([]);
        let p = parse_pod(&pod);
        assert!(matches!(&p.init[1].agent, Some(Err(e)) if e.contains("--job-api")));
    }

    #[test]
    fn rules_match_in_order_and_restart_all_wins_over_policies() {
        let c = |rules: Value, policy: Option<&str>, kind: Kind| ContainerSpec {
            name: "c".into(),
            image: "i".into(),
            kind,
            restart_policy: policy.map(str::to_owned),
            rules: parse_pod(&json!({"spec": {"containers": [{"name": "c",
                "restartPolicyRules": rules}]}}))
            .main[0]
                .rules
                .clone(),
            startup_probe: false,
            readiness_probe: false,
            agent: None,
        };
        let rules = json!([
            {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}},
            {"action": RESTART_ALL, "exitCodes": {"operator": "NotIn", "values": [0, 42, 1]}},
        ]);
        let x = c(rules, Some("Never"), Kind::Regular);
        assert_eq!(x.on_exit("Never", 42), OnExit::Restart, "first rule");
        assert_eq!(x.on_exit("Never", 87), OnExit::RestartAll, "NotIn");
        assert_eq!(
            x.on_exit("Always", 1),
            OnExit::Stay,
            "container policy Never"
        );
        assert_eq!(x.on_exit("Always", 0), OnExit::Stay);
        // No container policy: the pod's.
        let y = c(json!([]), None, Kind::Regular);
        assert_eq!(y.on_exit("Always", 0), OnExit::Restart);
        assert_eq!(y.on_exit("OnFailure", 0), OnExit::Stay);
        assert_eq!(y.on_exit("OnFailure", 2), OnExit::Restart);
        assert_eq!(y.on_exit("Never", 2), OnExit::Stay);
        // A Restart rule without a container policy is not acted on.
        let z = c(
            json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [3]}}]),
            None,
            Kind::Regular,
        );
        assert_eq!(z.on_exit("Never", 3), OnExit::Stay);
        // Init containers: success is completion; failure is retried
        // unless the pod's policy is Never.
        let i = c(json!([]), None, Kind::Init);
        assert_eq!(i.on_exit("Always", 0), OnExit::Stay);
        assert_eq!(i.on_exit("Always", 1), OnExit::Restart);
        assert_eq!(i.on_exit("Never", 1), OnExit::Stay);
        // Sidecars always come back.
        let s = c(json!([]), Some("Always"), Kind::Sidecar);
        assert_eq!(s.on_exit("Never", 0), OnExit::Restart);
        assert!(s.matching_rule(0).is_none());
    }

    #[test]
    fn references_expand_like_the_kubelet() {
        let env = vec![("A".to_owned(), "x".to_owned())];
        assert_eq!(expand("--a=$(A)", &env), "--a=x");
        assert_eq!(expand("$$(A) $(B) $", &env), "$(A) $(B) $");
    }
}
