//! `rebound sim --scenario resume --real-node`: a real node (kubelet
//! v1.36.2, containerd, runc: [`crate::envtest::node`]) beside the control
//! plane of `--assets`, and some of each tier's job pods on it, run by the
//! real kubelet with the real `rebound restart-agent`, beside the pods of
//! the simulated kubelets. The same job, the same fault and the same
//! recovery: the report gives the real pods' own fault → Running-and-Ready
//! time next to the simulated pods', the model's figure.
//!
//! The node uses the host's network (no pod network here), so each real
//! pod needs its own probe port, hence a pod template of its own: one
//! Volcano task of one pod each. Their containers are the scenario's pod
//! shape in images the node has (`setup` and the readiness probe run
//! `/pause -v`, which prints a version and exits 0; the worker is `/pause`,
//! which runs until stopped); the readiness probe keeps the template's
//! period (5 s). With `--real-scheduler` they are placed by kube-scheduler
//! through a nodeSelector; otherwise their template names the node. The
//! node carries a `NoSchedule` taint the simulated pods do not tolerate,
//! so the real scheduler never puts one of them there.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};

use super::super::SimArgs;
use super::super::env::SimEnv;
use super::track::PodView;
use crate::envtest::node::{REAL_NODE_LABEL, REBOUND_IMAGE, RealNode, images};
use rebound::inplace::AGENT_CONTAINER;
use rebound::inplace::inject::{InjectOptions, inject_document};

/// The scheduler name kube-scheduler's default profile serves.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// The chart's rules for the restart agent (get and watch the job kinds).
/// The real node of a run and how its pods are made.
pub struct RealSide {
    node: RealNode,
    /// Pods per job on the node.
    pub pods: usize,
    api_port: String,
    real_scheduler: bool,
}

impl std::fmt::Debug for RealSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealSide")
            .field("node", &self.node.name())
            .field("pods", &self.pods)
            .finish()
    }
}

/// One pod on the real node, before the fault and after the resume.
#[derive(Debug, Clone, Serialize)]
pub struct RealPod {
    /// Its name (the same before and after, in every tier).
    pub name: String,
    /// Whether it is the same pod (same uid) after the recovery: an
    /// in-place restart keeps it, a recreate replaces it.
    pub same_pod: bool,
    /// The restart agent's `restartCount`, before → after.
    pub agent_restarts: (i32, i32),
    /// The worker container's `restartCount`, before → after.
    pub worker_restarts: (i32, i32),
}

/// The real node's part of one tier.
#[derive(Debug, Clone, Serialize)]
pub struct RealTier {
    /// The node's name.
    pub node: String,
    /// Server clock: the fault's write committed → the real kubelet's
    /// status write of the last real pod to be back (Running, Ready, in the
    /// new generation). `null` without a server log or if not all came back.
    pub time_to_resume_s: Option<f64>,
    /// Client clock, the same span as this process's watch saw it.
    pub client_time_to_resume_s: Option<f64>,
    /// Server clock, the same span for the pods of the simulated kubelets
    /// (the model), for comparison.
    pub simulated_time_to_resume_s: Option<f64>,
    /// Client clock of the simulated pods.
    pub simulated_client_time_to_resume_s: Option<f64>,
    /// The real pods, before and after.
    pub pods: Vec<RealPod>,
}

/// `--assets` as a directory: the flag's, or the one
/// `crate::envtest::resolve_assets` finds (`REBOUND_TEST_ASSETS`, else the
/// built Kubernetes set).
pub fn assets_dir(args: &SimArgs) -> Option<PathBuf> {
    match &args.assets {
        Some(d) if !d.as_os_str().is_empty() => Some(d.clone()),
        Some(_) => crate::envtest::resolve_assets(std::path::Path::new(crate::PROJECT_ROOT))
            .ok()
            .map(|a| a.dir),
        None => None,
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl RealSide {
    /// Starts the node against `env`'s control plane (10-20 s), taints it
    /// and gives the namespace's `default` ServiceAccount the agent's RBAC.
    pub async fn start(env: &SimEnv, args: &SimArgs) -> anyhow::Result<RealSide> {
        let super::super::env::Server::ControlPlane(cp) = &env.server else {
            anyhow::bail!("--real-node needs --assets (a control plane this process starts)");
        };
        anyhow::ensure!(
            args.job_kind == "volcano",
            "--real-node measures Volcano Jobs only (--job-kind volcano): each real-node pod needs a pod template of its own (host network: one probe port per agent), which only a Volcano Job's tasks give one pod each"
        );
        anyhow::ensure!(
            args.real_node_pods >= 1,
            "--real-node-pods must be at least 1"
        );
        if let Some(why) = crate::envtest::node::missing_host_pieces() {
            anyhow::bail!("--real-node: {why}");
        }
        let dir =
            assets_dir(args).ok_or_else(|| anyhow::anyhow!("--real-node needs --assets DIR"))?;
        let assets = crate::envtest::node_assets_in(&dir)?;
        let bin = match &args.agent_binary {
            Some(b) => b.clone(),
            None => std::env::current_exe()?,
        };
        let imgs = images(&assets, &bin)?;
        let kubeconfig = cp.kubeconfig_path().to_owned();
        let api_port = cp.url().rsplit(':').next().unwrap_or_default().to_owned();
        eprintln!(
            "sim resume: starting a real node (kubelet {}, containerd, runc; agent image from {})...",
            assets.kubelet.display(),
            bin.display()
        );
        let node = tokio::task::spawn_blocking(move || {
            crate::envtest::on_keeper_thread("sim-real-node", move || {
                let name = format!("real-{}", crate::actors::util::name_suffix());
                RealNode::start_with_kubeconfig(&kubeconfig, &assets, &name, &imgs)
                    .map_err(|e| e.to_string())
            })
        })
        .await?
        .map_err(|e| anyhow::anyhow!("the real node: {e}"))?;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.bed.client());
        nodes
            .patch(
                node.name(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": [
                    {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}]}})),
            )
            .await?;
        agent_rbac(env).await?;
        Ok(RealSide {
            node,
            pods: args.real_node_pods,
            api_port,
            real_scheduler: args.real_scheduler,
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        self.node.name()
    }

    /// The node's directory (its logs), for error messages.
    pub fn dir(&self) -> &Path {
        self.node.dir()
    }

    /// Whether the pod is one of the real node's.
    pub fn runs(&self, p: &PodView) -> bool {
        p.node.as_deref() == Some(self.name())
    }

    /// Adds the real node's tasks (`real-0`, …, one pod each) to the
    /// Volcano Job `doc` of the tier (its gang grows by as many).
    pub fn add_tasks(&self, doc: &mut Value, tier_labels: &Value) -> anyhow::Result<()> {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut tasks = doc["spec"]["tasks"].as_array().cloned().unwrap_or_default();
        for i in 0..self.pods {
            let place = if self.real_scheduler {
                Placement::Scheduler
            } else {
                Placement::Node(self.name())
            };
            tasks.push(real_task(
                &name,
                &format!("real-{i}"),
                tier_labels,
                place,
                &self.api_port,
            )?);
        }
        doc["spec"]["tasks"] = Value::Array(tasks);
        let min = doc["spec"]["minAvailable"].as_i64().unwrap_or(0);
        doc["spec"]["minAvailable"] = json!(min + i64::try_from(self.pods)?);
        Ok(())
    }

    /// Stops the kubelet and containerd; the node's reaper removes its
    /// containers and directory.
    pub fn stop(mut self) {
        self.node.stop();
    }
}

/// Where a real-node pod goes.
#[derive(Debug, Clone, Copy)]
enum Placement<'a> {
    /// Bound by its template (`spec.nodeName`).
    Node(&'a str),
    /// Placed by kube-scheduler's default profile (a `nodeSelector` on
    /// the real node's label).
    Scheduler,
}

/// One task of one pod for the real node, wired as `rebound inject`
/// wires it (with a probe port of its own), its agent pointed at the
/// API server's loopback address (no kube-proxy here).
fn real_task(
    job: &str,
    task: &str,
    labels: &Value,
    place: Placement<'_>,
    api_port: &str,
) -> anyhow::Result<Value> {
    let mut spec = json!({
        "hostNetwork": true,
        "restartPolicy": "OnFailure",
        "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists"}],
        "initContainers": [{"name": "setup", "image": REBOUND_IMAGE, "command": ["/pause", "-v"]}],
        "containers": [{"name": "worker", "image": REBOUND_IMAGE, "command": ["/pause"],
            "readinessProbe": {"exec": {"command": ["/pause", "-v"]}, "periodSeconds": 5}}],
    });
    match place {
        Placement::Scheduler => {
            spec["schedulerName"] = json!(DEFAULT_SCHEDULER);
            spec["nodeSelector"] = json!({REAL_NODE_LABEL: "true"});
        }
        Placement::Node(n) => spec["nodeName"] = json!(n),
    }
    let mut one = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": job},
        "spec": {"tasks": [{"name": task, "replicas": 1,
            "template": {"metadata": {"name": task, "labels": labels}, "spec": spec}}]},
    });
    let opts = InjectOptions {
        image: REBOUND_IMAGE.into(),
        probe_port: free_port()?,
        ..InjectOptions::default()
    };
    inject_document(&mut one, &opts, job)
        .map_err(|e| anyhow::anyhow!("rebound inject refused a real-node task: {e}"))?;
    let agent = one
        .pointer_mut("/spec/tasks/0/template/spec/initContainers")
        .and_then(Value::as_array_mut)
        .and_then(|a| a.iter_mut().find(|c| c["name"] == AGENT_CONTAINER))
        .ok_or_else(|| anyhow::anyhow!("rebound inject added no agent to {task}"))?;
    let env = agent["env"]
        .as_array_mut()
        .ok_or_else(|| anyhow::anyhow!("the agent of {task} has no env"))?;
    env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": api_port}));
    Ok(one["spec"]["tasks"][0].take())
}

/// The chart's agent rules for the namespace's `default` ServiceAccount.
async fn agent_rbac(env: &SimEnv) -> anyhow::Result<()> {
    crate::testbed::grant_restart_agent(&env.bed.client(), &env.ns, "rebound-sim").await?;
    Ok(())
}

/// The latest of the moments each pod of `backs` came back, and that pod.
pub fn last_back<'a>(
    backs: impl Iterator<Item = &'a (PodView, SystemTime)>,
) -> Option<(&'a PodView, SystemTime)> {
    backs.map(|(p, t)| (p, *t)).max_by_key(|(_, t)| *t)
}

/// What the report says of the real node's figures against the simulated
/// pods' (the model) in each tier: how much slower or faster, honestly.
pub fn real_notes(node: &str, pods: usize, tiers: &[super::TierResult]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tiers {
        let Some(k) = &t.real_kubelet else { continue };
        let kept = k.pods.iter().filter(|p| p.same_pod).count();
        let restarted = k
            .pods
            .iter()
            .filter(|p| p.same_pod && p.agent_restarts.1 > p.agent_restarts.0)
            .count();
        let cmp = match (k.time_to_resume_s, k.simulated_time_to_resume_s) {
            (Some(r), Some(s)) if s > 0.0 => format!(
                "real kubelet {r:.2} s against the simulated pods' {s:.2} s: {} by {:.2} s ({:.2}×); the tier's floor (the model's least) {:.2} s",
                if r >= s { "slower" } else { "faster" },
                (r - s).abs(),
                r / s,
                t.floor.total_s()
            ),
            _ => "no server-clock figure for one of the two".into(),
        };
        out.push(format!(
            "{}: {pods} pod(s) on the real node {node}: {kept} kept (same uid), {restarted} of them restarted in place (agent restart count up); {cmp}",
            t.tier
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound::inplace::DEFAULT_EXIT_CODE;

    fn agent(t: &Value) -> Value {
        t["template"]["spec"]["initContainers"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == AGENT_CONTAINER))
            .cloned()
            .expect("the agent")
    }

    #[test]
    fn a_real_node_task_is_one_wired_pod_on_the_host_network() {
        let labels = json!({"tier": "InPlace"});
        let t = real_task("j", "real-0", &labels, Placement::Node("real-x"), "6443").expect("task");
        assert_eq!(t["name"], "real-0");
        assert_eq!(t["replicas"], 1);
        let spec = &t["template"]["spec"];
        assert_eq!(spec["nodeName"], "real-x");
        assert_eq!(spec["hostNetwork"], true);
        assert_eq!(t["template"]["metadata"]["labels"]["tier"], "InPlace");
        let a = agent(&t);
        assert_eq!(a["image"], REBOUND_IMAGE);
        let env = a["env"].as_array().expect("env");
        assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_PORT", "value": "6443"})));
        assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"})));
        assert_eq!(
            a["restartPolicyRules"][0]["exitCodes"]["values"][0],
            json!(DEFAULT_EXIT_CODE)
        );
        // Each task its own probe port (the host's network is shared).
        let u = real_task("j", "real-1", &labels, Placement::Scheduler, "6443").expect("task");
        let port = |t: &Value| agent(t)["startupProbe"]["httpGet"]["port"].clone();
        assert_ne!(port(&t), port(&u));
        let spec = &u["template"]["spec"];
        assert_eq!(spec["schedulerName"], DEFAULT_SCHEDULER);
        assert_eq!(spec["nodeSelector"][REAL_NODE_LABEL], "true");
        assert!(spec.get("nodeName").is_none());
    }
}
