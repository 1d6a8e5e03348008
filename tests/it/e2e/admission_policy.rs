//! The admission tests' policy copies: rebound's generated
//! MutatingAdmissionPolicy installed on the real server under a name of
//! the test's, bound to the test's namespace (and, when asked, to pods of
//! one label), with a probe that waits until the server applies it; and
//! readers of the agent a pod was given. Shared by admission.rs and
//! real_node_admission.rs.

use super::*;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use kube::api::{DeleteParams, PostParams};
use rebound::inplace::AGENT_CONTAINER;
use rebound::inplace::admission::policy_yaml;
use rebound::inplace::inject::InjectOptions;
use serde_json::{Value, json};

/// `../shared` beside the project (in a git worktree, maybe two levels up).
pub(super) fn shared_crd(rel: &str) -> String {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = [root.join("../shared"), root.join("../../shared")]
        .into_iter()
        .find(|d| d.is_dir())
        .expect("../shared beside the project");
    let p = dir.join("data/crds").join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Installs the generated policy, its binding limited to the bed's `ml`
/// namespace (other tests share the server), both named for this run, and
/// waits until the server applies it (a server-side dry run of an opted-in
/// pod comes back wired). Returns the name, for [`uninstall`].
pub(super) async fn install_policy(bed: &Testbed, ml: &str) -> String {
    install_policy_copy(bed, ml, &PolicyCopy::default()).await
}

/// How a test's copy of the generated policy differs from what `rebound
/// admission-policy` prints, beside its name and its binding to the
/// test's namespace.
#[derive(Default)]
pub(super) struct PolicyCopy {
    /// The agent's settings (`rebound admission-policy` flags).
    pub(super) opts: InjectOptions,
    /// Only pods with this label (the binding's `objectSelector`); also
    /// names the copy.
    pub(super) only: Option<(&'static str, &'static str)>,
    /// Variables added to the agent's environment by a second mutation of
    /// the copy, after the generated one (the real node has no
    /// kube-proxy: its agents are told the API server's loopback address).
    pub(super) agent_env: Vec<(&'static str, String)>,
    /// The pods run on the node's network (the real node has no pod
    /// network): the copy wires them, which the generated policy does not
    /// (two agents' probe ports would clash on one node); each copy then
    /// has a probe port of its own.
    pub(super) host_network: bool,
}

/// [`install_policy`] for a [`PolicyCopy`].
pub(super) async fn install_policy_copy(bed: &Testbed, ml: &str, copy: &PolicyCopy) -> String {
    let yaml = policy_yaml(&copy.opts).expect("policy");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("policy YAML");
    let name = match copy.only {
        Some((_, v)) => format!("rebound-restart-agent-{ml}-{v}"),
        None => format!("rebound-restart-agent-{ml}"),
    };
    let mut policy: MutatingAdmissionPolicy =
        serde_json::from_value(docs[0].clone()).expect("policy");
    policy.metadata.name = Some(name.clone());
    if copy.host_network
        && let Some(spec) = policy.spec.as_mut()
    {
        spec.match_conditions
            .iter_mut()
            .flatten()
            .filter(|c| c.name == rebound::inplace::admission::HOST_NETWORK_CONDITION)
            .for_each(|c| c.expression = "true".into());
    }
    if !copy.agent_env.is_empty()
        && let Some(spec) = policy.spec.as_mut()
    {
        // The agent is the last init container once the first mutation
        // has run (mutations apply in order, each to the result of the
        // one before).
        let adds: Vec<String> = copy
            .agent_env
            .iter()
            .map(|(k, v)| {
                format!(
                    "JSONPatch{{op: \"add\", path: \"/spec/initContainers/\" + string(size(object.spec.initContainers) - 1) + \"/env/-\", value: Object.spec.initContainers.env{{name: {}, value: {}}}}}",
                    rebound::inplace::admission::cel_string(k),
                    rebound::inplace::admission::cel_string(v)
                )
            })
            .collect();
        let mut mutations = spec.mutations.take().unwrap_or_default();
        let mut extra = mutations[0].clone();
        if let Some(p) = extra.json_patch.as_mut() {
            p.expression = Some(format!("[{}]", adds.join(", ")));
        }
        mutations.push(extra);
        spec.mutations = Some(mutations);
    }
    let mut binding: MutatingAdmissionPolicyBinding =
        serde_json::from_value(docs[1].clone()).expect("binding");
    binding.metadata.name = Some(name.clone());
    let mut spec = binding.spec.take().unwrap_or_default();
    spec.policy_name = Some(name.clone());
    let mut matching = json!({"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": ml}}});
    let mut labels = json!({OPT_IN.0: OPT_IN.1, "batch.kubernetes.io/job-name": "probe"});
    if let Some((k, v)) = copy.only {
        matching["objectSelector"] = json!({"matchLabels": {k: v}});
        labels[k] = json!(v);
    }
    spec.match_resources = Some(serde_json::from_value(matching).expect("match resources"));
    binding.spec = Some(spec);
    let pp = PostParams::default();
    Api::<MutatingAdmissionPolicy>::all(bed.client())
        .create(&pp, &policy)
        .await
        .expect("create the policy");
    Api::<MutatingAdmissionPolicyBinding>::all(bed.client())
        .create(&pp, &binding)
        .await
        .expect("create the binding");
    let pods: Api<Pod> = Api::namespaced(bed.client(), ml);
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "probe", "labels": labels},
        "spec": {"containers": [{"name": "w", "image": "i"}]},
    }))
    .expect("pod");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait("the admission policy in effect", T, || async {
        let p = pods.create(&dry, &probe).await.ok()?;
        let a = agents(&p);
        (a.len() == 1
            && copy
                .agent_env
                .iter()
                .all(|(k, v)| env_of(&a[0], k).as_deref() == Some(v.as_str())))
        .then_some(())
    })
    .await;
    name
}

pub(super) async fn uninstall(bed: &Testbed, name: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<MutatingAdmissionPolicyBinding>::all(bed.client())
        .delete(name, &dp)
        .await;
    let _ = Api::<MutatingAdmissionPolicy>::all(bed.client())
        .delete(name, &dp)
        .await;
}

/// The pod's restart agents (init containers of that name).
pub(super) fn agents(p: &Pod) -> Vec<k8s_openapi::api::core::v1::Container> {
    p.spec
        .as_ref()
        .and_then(|s| s.init_containers.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.name == AGENT_CONTAINER)
        .collect()
}

pub(super) fn env_of(c: &k8s_openapi::api::core::v1::Container, name: &str) -> Option<String> {
    c.env.iter().flatten().find(|e| e.name == name).map(|e| {
        e.value.clone().unwrap_or_else(|| {
            e.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.clone())
                .unwrap_or_default()
        })
    })
}
