//! Device isolation through DRA, on the real control plane only: a
//! control plane of this module's own (kube-apiserver serving
//! `resource.k8s.io/v1beta2`, and kube-apiserver, kube-controller-manager
//! and kube-scheduler with the `DRADeviceTaintRules` gate, beta and off by
//! default in v1.36), the test bed's fake nodes and simulated kubelets on
//! it, and the test playing the GPU driver: a DeviceClass `gpu.nvidia.com`
//! and one ResourceSlice per node (pool = node name, `gpu-0`..`gpu-5` with
//! `type`, `index`, `uuid` and `resource.kubernetes.io/pciBusID`). Every
//! pod asks for its GPU through a ResourceClaimTemplate, so the real
//! resourceclaim controller makes its claim and the real scheduler
//! allocates it and binds the pod; the batch Jobs are the real Job
//! controller's.
//!
//! - `a_hand_made_device_taint_rule_keeps_new_allocations_off_its_gpu`:
//!   the environment alone, without rebound: a rule made by hand keeps
//!   new allocations off its GPU (a pod pinned to it stays Pending, an
//!   unpinned one gets another GPU), and once it is deleted the pinned
//!   pod gets the GPU.
//! - `a_faulty_gpu_is_isolated_by_a_device_taint_rule_and_only_its_job_restarts`:
//!   with `isolation: Device` on the root policy, an XID 48 on one GPU
//!   makes rebound create a DeviceTaintRule for that GPU instead of
//!   cordoning the node, restart the job holding it (whose new pod gets
//!   another GPU) and leave the job on another GPU of the node alone;
//!   when the fault clears the rule goes and the GPU is allocated again.
//! - `a_faulty_gpu_returns_to_service_only_after_its_validation_job_succeeds`:
//!   with a `validation` on the root policy as well, the fault's clearing
//!   makes rebound run the validation Job on the node (the real Job
//!   controller, the simulated kubelet running its pod until the test ends
//!   its container); the rule stays while it runs and after it fails (one
//!   `ValidationFailed` Event on the node), the Job deleted is run again,
//!   and only its success deletes the rule and lets a pod pinned to the
//!   GPU have it.
//!
//! The embedded server serves no `resource.k8s.io`, so there is no
//! `::embedded` variant; without the real components the tests print
//! `SKIPPED on the real server: ...` and pass, unless
//! `REBOUND_REQUIRE_REAL_SERVER=1`.

use super::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::api::resource::v1beta2::DeviceTaintRule;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams, PropagationPolicy};
use rebound_sim::cluster::SharedCluster;
use rebound_sim::envtest::{ControlPlane, ControlPlaneConfig, resolve_scheduler};
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The gate of DeviceTaintRules, on every component that reads them.
const GATE: &str = "--feature-gates=DRADeviceTaintRules=true";
/// DeviceTaintRules are served at v1beta2 only when asked for.
const RUNTIME_CONFIG: &str = "--runtime-config=resource.k8s.io/v1beta2=true";
const DRIVER: &str = "gpu.nvidia.com";
const CLASS: &str = "gpu.nvidia.com";
const GPUS: u32 = 6;
/// The taint rebound's DeviceTaintRules carry (the contract).
const FAULT_TAINT: &str = "rebound.dev/device-fault";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "rebound");
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label of rebound's validation Jobs (docs/devices.md).
const VALIDATION: (&str, &str) = ("rebound.dev/validation", "device");
/// The container of the validation Job the test's policy asks for.
const DIAG: &str = "diag";
/// Longer than [`T`]: a restarted batch Job's replacement pod waits the Job
/// controller's 10 s failure backoff, and a claim's release goes through
/// the kubelet, the resourceclaim controller and the garbage collector.
const LONG: Duration = Duration::from_secs(60);

/// Runs `async fn $name(cp: &'static ControlPlane)` as `$name::real`.
macro_rules! dra {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                let _watchdog = $crate::watchdog::start();
                if let Some(cp) = super::plane_or_skip(module_path!()).await {
                    let t = std::time::Instant::now();
                    rebound_sim::testbed::check_restart_endings(super::$name(cp)).await;
                    eprintln!("{}::real took {:?}", module_path!(), t.elapsed());
                }
            }
        }
    };
}

/// The control plane these tests need, or why its binaries are missing.
fn dra_config() -> Result<ControlPlaneConfig, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cfg = ControlPlaneConfig::resolve().map_err(|e| e.to_string())?;
    cfg.scheduler = Some(resolve_scheduler(root).map_err(|e| e.to_string())?);
    cfg.apiserver_flags = vec![RUNTIME_CONFIG.into(), GATE.into()];
    cfg.controller_manager_flags = vec![GATE.into()];
    cfg.scheduler_flags = vec![GATE.into()];
    Ok(cfg)
}

/// This module's control plane (see [`super::own_plane`]).
async fn plane_or_skip(test: &str) -> Option<&'static ControlPlane> {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    super::own_plane::plane_or_skip(test, "with DRA device taint rules", &CP, dra_config).await
}

/// A bed of `nodes` fake nodes on the control plane.
async fn dra_bed(cp: &ControlPlane, nodes: usize) -> Testbed {
    super::own_plane::bed_on(cp, nodes).await
}

/// Two fake nodes publishing their GPUs, the controller with the root
/// policy `policy`, the claim templates in `ml`: the bed, the controller,
/// the first node's name and `ml`'s.
async fn gpu_bed(cp: &ControlPlane, policy: &str) -> (Testbed, ControllerHandle, String, String) {
    let bed = dra_bed(cp, 2).await;
    let names = bed.cluster.node_names();
    for node in &names {
        publish_gpus(&bed, node).await;
    }
    let (bed, ctl) = ready_bed(bed, policy).await;
    let ns = bed.ns("ml");
    claim_templates(&bed, &ns).await;
    (bed, ctl, names[0].clone(), ns)
}

/// The root policy of [`BASE`] with `isolation: Device`.
fn device_isolation_policy() -> String {
    root_policy_with(
        "  nodeActions:\n",
        "  nodeActions:\n    isolation: Device\n",
    )
}

/// [`device_isolation_policy`] with a validation: a Job of one container
/// [`DIAG`], which the simulated kubelet runs until the test ends it with
/// an exit code; a timeout long past the test.
fn validation_policy() -> String {
    let policy = device_isolation_policy();
    let validation = format!(
        r#"    isolation: Device
    validation:
      timeout: 10m
      job:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: {DIAG}
              image: registry.local/rebound-sim/dcgm:latest
              command: ["sh", "-c", "dcgmi diag -r 2 -i \"$REBOUND_DEVICE_INDEX\""]
"#
    );
    let out = policy.replace("    isolation: Device\n", &validation);
    assert_ne!(out, policy, "the device isolation policy has isolation");
    out
}

async fn create<K>(api: &Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).expect("object");
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => o,
        Err(kube::Error::Api(e)) if e.code == 409 => api
            .get(&obj.meta().name.clone().unwrap_or_default())
            .await
            .expect("existing object"),
        Err(e) => panic!("create {:?}: {e}", obj.meta().name),
    }
}

/// Plays the GPU driver on `node`: the DeviceClass (once per cluster) and
/// the node's ResourceSlice, owned by the Node as the kubelet plugin's
/// are (the garbage collector removes it with the fake node).
async fn publish_gpus(bed: &Testbed, node_name: &str) {
    create(
        &Api::<DeviceClass>::all(bed.client()),
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression":
                format!("device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'")}}]},
        }),
    )
    .await;
    let nd = node(bed, node_name).await;
    let devices: Vec<Value> = (0..GPUS)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
                "type": {"string": "gpu"},
                "index": {"int": i},
                "uuid": {"string": format!("GPU-{node_name}-{i}")},
                "resource.kubernetes.io/pciBusID": {"string": format!("0000:{:02x}:00.0", 0x18 + i)},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
            }})
        })
        .collect();
    create(
        &Api::<ResourceSlice>::all(bed.client()),
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node_name}-{DRIVER}"), "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": node_name,
                "uid": nd.uid().expect("node uid"), "controller": true}]},
            "spec": {"driver": DRIVER, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices},
        }),
    )
    .await;
}

/// The claim template asking for any GPU.
const ANY: &str = "any-gpu";

/// The claim template pinned to GPU `index`.
fn pinned(index: u32) -> String {
    format!("gpu-index-{index}")
}

/// [`ANY`] and one template pinned to each GPU index, in `ns`.
async fn claim_templates(bed: &Testbed, ns: &str) {
    let api: Api<ResourceClaimTemplate> = Api::namespaced(bed.client(), ns);
    let request = |selectors: Value| json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "selectors": selectors}});
    let mut all = vec![(ANY.to_string(), request(json!([])))];
    for i in 0..GPUS {
        all.push((
            pinned(i),
            request(json!([{"cel": {"expression":
                format!("device.attributes[\"{DRIVER}\"].index == {i}")}}])),
        ));
    }
    for (name, req) in all {
        create(
            &api,
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                   "metadata": {"name": name, "namespace": ns},
                   "spec": {"spec": {"devices": {"requests": [req]}}}}),
        )
        .await;
    }
}

/// A pod spec for kube-scheduler (`default-scheduler`), on `node` (the
/// fake node's taint tolerated), with one GPU claim from `template`.
fn pod_spec(node: &str, template: &str) -> Value {
    json!({
        "restartPolicy": "Never",
        "schedulerName": "default-scheduler",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": SharedCluster::default().taint_key, "operator": "Exists"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [{"name": "worker", "image": "registry.local/rebound-sim/trainer:latest",
                        "command": ["python", "train.py"],
                        "resources": {"claims": [{"name": "gpu"}]}}],
    })
}

/// An opted-in batch Job of one pod on `node` with a GPU from `template`.
async fn gpu_job(bed: &Testbed, ns: &str, name: &str, node: &str, template: &str) {
    let labels = json!({OPT_IN.0: OPT_IN.1});
    create(
        &Api::<Job>::namespaced(bed.client(), ns),
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6,
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec(node, template)}},
        }),
    )
    .await;
}

/// A bare pod (no job, not opted in) on `node` with a GPU from `template`.
async fn gpu_pod(bed: &Testbed, ns: &str, name: &str, node: &str, template: &str) {
    create(
        &Api::<Pod>::namespaced(bed.client(), ns),
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns},
               "spec": pod_spec(node, template)}),
    )
    .await;
}

/// The `(pool, device)` of `pod`'s GPU claim, when the claim is
/// allocated and reserved for this pod.
async fn device_of(bed: &Testbed, ns: &str, pod: &Pod) -> Option<(String, String)> {
    let uid = pod.uid()?;
    let claim = pod
        .status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "gpu")?
        .resource_claim_name
        .clone()?;
    let claim = Api::<ResourceClaim>::namespaced(bed.client(), ns)
        .get_opt(&claim)
        .await
        .ok()??;
    let st = claim.status?;
    if !st.reserved_for?.iter().any(|r| r.uid == uid) {
        return None;
    }
    st.allocation?
        .devices?
        .results?
        .into_iter()
        .find(|r| r.driver == DRIVER)
        .map(|r| (r.pool, r.device))
}

/// The running pod of job `job` on `node` and its GPU there.
async fn job_gpu(bed: &Testbed, ns: &str, job: &str, node: &str) -> Option<(Pod, String)> {
    let pods = running(bed, ns, &format!("{JOB_NAME}={job}")).await;
    let pod = pods.into_iter().next()?;
    if pod.spec.as_ref()?.node_name.as_deref() != Some(node) {
        return None;
    }
    let (pool, device) = device_of(bed, ns, &pod).await?;
    (pool == node).then_some((pod, device))
}

/// The named pod, running on `node`, and its GPU there.
async fn pod_gpu(bed: &Testbed, ns: &str, name: &str, node: &str) -> Option<String> {
    let pod = Api::<Pod>::namespaced(bed.client(), ns)
        .get_opt(name)
        .await
        .ok()??;
    if !rebound_sim::cluster::pod_running(&pod)
        || pod.spec.as_ref()?.node_name.as_deref() != Some(node)
    {
        return None;
    }
    let (pool, device) = device_of(bed, ns, &pod).await?;
    (pool == node).then_some(device)
}

/// Whether any claim of `ns` is allocated `(node, device)`.
async fn allocated(bed: &Testbed, ns: &str, node: &str, device: &str) -> bool {
    Api::<ResourceClaim>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .into_iter()
        .filter_map(|c| c.status?.allocation?.devices)
        .flat_map(|d| d.results.unwrap_or_default())
        .any(|r| r.driver == DRIVER && r.pool == node && r.device == device)
}

/// The scheduler's `FailedScheduling` for pod `name` because no device
/// could be allocated, once there is one: the positive control before a
/// pod's staying Pending means anything.
async fn failed_allocation(bed: &Testbed, ns: &str, name: &str) -> String {
    until(
        bed,
        ns,
        &format!("{name}: FailedScheduling, cannot allocate"),
        T,
        || async {
            events_with_reason(bed, ns, "FailedScheduling")
                .await
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .filter_map(|e| e.note)
                .find(|n| n.contains("cannot allocate all claims"))
        },
    )
    .await
}

async fn bound_node(bed: &Testbed, ns: &str, name: &str) -> Option<String> {
    Api::<Pod>::namespaced(bed.client(), ns)
        .get(name)
        .await
        .expect("pod")
        .spec?
        .node_name
}

/// DeviceTaintRules selecting `(DRIVER, pool, device)`.
async fn rules_for(bed: &Testbed, pool: &str, device: &str) -> Vec<DeviceTaintRule> {
    Api::<DeviceTaintRule>::all(bed.client())
        .list(&ListParams::default())
        .await
        .expect("DeviceTaintRules (resource.k8s.io/v1beta2)")
        .items
        .into_iter()
        .filter(|r| {
            r.spec.device_selector.as_ref().is_some_and(|s| {
                s.driver.as_deref() == Some(DRIVER)
                    && s.pool.as_deref() == Some(pool)
                    && s.device.as_deref() == Some(device)
            })
        })
        .collect()
}

/// What the namespace holds, for a timeout's message: the bed's nodes
/// (cordon, taints), pods (node, phase, the scheduler's last refusal) and
/// claims (allocation, reservations), and every DeviceTaintRule.
async fn describe(bed: &Testbed, ns: &str) -> String {
    let mut out = String::new();
    for n in bed.cluster.node_names() {
        if let Ok(nd) = Api::<Node>::all(bed.client()).get(&n).await {
            let taints: Vec<String> = nd
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            out += &format!("\n  node {n} cordoned={} taints={taints:?}", cordoned(&nd));
        }
    }
    let refusals = events_with_reason(bed, ns, "FailedScheduling").await;
    if let Ok(pods) = Api::<Pod>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
    {
        for p in pods.items {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let refused = refusals
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == p.uid().as_deref()
                })
                .filter_map(|e| e.note.clone())
                .next_back()
                .filter(|_| bound.is_none());
            out += &format!(
                "\n  pod {} uid={} node={bound:?} phase={:?} deleting={}{}",
                p.name_any(),
                p.uid().unwrap_or_default(),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                p.metadata.deletion_timestamp.is_some(),
                refused
                    .map(|r| format!(" refused: {r}"))
                    .unwrap_or_default(),
            );
        }
    }
    if let Ok(claims) = Api::<ResourceClaim>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
    {
        for c in claims.items {
            let st = c.status.clone().unwrap_or_default();
            let devs: Vec<String> = st
                .allocation
                .and_then(|a| a.devices)
                .and_then(|d| d.results)
                .unwrap_or_default()
                .into_iter()
                .map(|r| format!("{}/{}", r.pool, r.device))
                .collect();
            let by: Vec<String> = st
                .reserved_for
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.name)
                .collect();
            out += &format!(
                "\n  claim {} devices={devs:?} reservedFor={by:?}",
                c.name_any()
            );
        }
    }
    match Api::<DeviceTaintRule>::all(bed.client())
        .list(&ListParams::default())
        .await
    {
        Ok(rules) => {
            for r in rules.items {
                out += &format!(
                    "\n  rule {} labels={:?} selector={:?} taint={:?}",
                    r.name_any(),
                    r.metadata.labels.clone().unwrap_or_default(),
                    r.spec.device_selector,
                    r.spec.taint
                );
            }
        }
        Err(e) => out += &format!("\n  DeviceTaintRules: {e}"),
    }
    out += &describe_validations(bed).await;
    out
}

/// rebound's validation Jobs in the root namespace (state, pods and their
/// containers) and its device Events on the bed's nodes, for
/// [`describe`].
async fn describe_validations(bed: &Testbed) -> String {
    let mut out = String::new();
    let root = bed.root();
    let jobs = Api::<Job>::namespaced(bed.client(), &root)
        .list(&ListParams::default().labels(&format!("{}={}", VALIDATION.0, VALIDATION.1)))
        .await;
    for j in jobs.map(|l| l.items).unwrap_or_default() {
        let st = j.status.clone().unwrap_or_default();
        let conds: Vec<String> = st
            .conditions
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.status == "True")
            .map(|c| format!("{}({})", c.type_, c.reason.unwrap_or_default()))
            .collect();
        out += &format!(
            "\n  validation job {}/{} uid={} deleting={} active={:?} succeeded={:?} failed={:?} conditions={conds:?}",
            root,
            j.name_any(),
            j.uid().unwrap_or_default(),
            j.metadata.deletion_timestamp.is_some(),
            st.active,
            st.succeeded,
            st.failed,
        );
    }
    let pods = Api::<Pod>::namespaced(bed.client(), &root)
        .list(&ListParams::default().labels(JOB_NAME))
        .await;
    for p in pods.map(|l| l.items).unwrap_or_default() {
        let st = p.status.clone().unwrap_or_default();
        let containers: Vec<String> = st
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .map(|c| format!("{}:{:?}", c.name, c.state))
            .collect();
        out += &format!(
            "\n  validation pod {} job={:?} node={:?} phase={:?} deleting={} containers={containers:?}",
            p.name_any(),
            p.labels().get(JOB_NAME),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            st.phase,
            p.metadata.deletion_timestamp.is_some(),
        );
    }
    for n in bed.cluster.node_names() {
        for e in node_events(bed, &n).await {
            out += &format!(
                "\n  event on node {n}: {:?} {:?}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            );
        }
    }
    out
}

/// [`wait`], polling every 100 ms, with what the namespace holds in the
/// message of a timeout.
async fn until<T, F, Fut>(bed: &Testbed, ns: &str, what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() >= timeout {
            panic!(
                "timed out after {timeout:?} waiting for: {what}; the namespace:{}",
                describe(bed, ns).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// rebound's Events about node `node` (written in `default`) that
/// concern its devices.
async fn node_events(bed: &Testbed, node: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let mut out = Vec::new();
    for reason in ["DeviceIsolated", "ValidationFailed", "DeviceReturned"] {
        out.extend(
            events_with_reason(bed, "default", reason)
                .await
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("Node") && r.name.as_deref() == Some(node)
                    })
                }),
        );
    }
    out
}

/// How many times rebound said `reason` about node `node` (an Event's
/// series counted), and the notes.
async fn said_on_node(bed: &Testbed, node: &str, reason: &str) -> (i32, Vec<String>) {
    let mut n = 0;
    let mut notes = Vec::new();
    for e in node_events(bed, node).await {
        if e.reason.as_deref() == Some(reason) {
            n += e.series.as_ref().map_or(1, |s| s.count.max(1));
            notes.push(e.note.clone().unwrap_or_default());
        }
    }
    (n, notes)
}

/// Milliseconds since `t`, for the step timings printed.
fn ms(t: Instant) -> u128 {
    t.elapsed().as_millis()
}

async fn a_hand_made_device_taint_rule_keeps_new_allocations_off_its_gpu(
    cp: &'static ControlPlane,
) {
    let t = Instant::now();
    let bed = dra_bed(cp, 1).await;
    let n = bed.cluster.node_names()[0].clone();
    publish_gpus(&bed, &n).await;
    let ns = bed.ensure_namespace("ml").await.expect("namespace");
    claim_templates(&bed, &ns).await;
    eprintln!("dra env: bed, slice and templates in {} ms", ms(t));

    // kube-controller-manager's Job controller makes the pod and its
    // resourceclaim controller the claim; kube-scheduler allocates gpu-0
    // and binds; the simulated kubelet runs the pod.
    let t = Instant::now();
    gpu_job(&bed, &ns, "holder", &n, &pinned(0)).await;
    let (_, dev) = until(&bed, &ns, "the holder running on gpu-0", LONG, || {
        job_gpu(&bed, &ns, "holder", &n)
    })
    .await;
    assert_eq!(dev, "gpu-0");
    eprintln!(
        "dra env: a Job's pod allocated gpu-0 and running in {} ms",
        ms(t)
    );

    // A rule made by hand, as rebound will make it.
    let t = Instant::now();
    let rule = format!("{n}-gpu-1");
    let rules: Api<DeviceTaintRule> = Api::all(bed.client());
    create(
        &rules,
        json!({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
               "metadata": {"name": rule, "labels": {MANAGED_BY.0: "dra-devices-test"}},
               "spec": {"deviceSelector": {"driver": DRIVER, "pool": n, "device": "gpu-1"},
                        "taint": {"key": FAULT_TAINT, "value": "48", "effect": "NoSchedule"}}}),
    )
    .await;
    gpu_pod(&bed, &ns, "pinned-1", &n, &pinned(1)).await;
    let why = failed_allocation(&bed, &ns, "pinned-1").await;
    assert_eq!(
        bound_node(&bed, &ns, "pinned-1").await,
        None,
        "a pod pinned to a tainted GPU is not bound ({why})"
    );
    eprintln!(
        "dra env: the pod pinned to the tainted gpu-1 refused in {} ms: {why}",
        ms(t)
    );
    let t = Instant::now();
    gpu_pod(&bed, &ns, "any", &n, ANY).await;
    let dev = until(&bed, &ns, "the unpinned pod running", LONG, || {
        pod_gpu(&bed, &ns, "any", &n)
    })
    .await;
    assert!(
        dev != "gpu-1" && dev != "gpu-0",
        "an unpinned pod gets a free untainted GPU, not {dev}"
    );
    eprintln!("dra env: an unpinned pod got {dev} in {} ms", ms(t));
    // kube-controller-manager's device-taint-eviction controller (gate on)
    // reports on every rule.
    let st = until(
        &bed,
        &ns,
        "the rule's status from kube-controller-manager",
        T,
        || async {
            let r = rules.get(&rule).await.ok()?;
            let c = r.status?.conditions?;
            (!c.is_empty()).then_some(c)
        },
    )
    .await;
    eprintln!("dra env: rule status {st:?}");
    assert!(
        !cordoned(&node(&bed, &n).await),
        "a device rule cordons nothing"
    );

    // The rule gone, the pinned pod gets its GPU.
    let t = Instant::now();
    rules
        .delete(&rule, &DeleteParams::default())
        .await
        .expect("delete the rule");
    let dev = until(&bed, &ns, "the pinned pod running on gpu-1", LONG, || {
        pod_gpu(&bed, &ns, "pinned-1", &n)
    })
    .await;
    assert_eq!(dev, "gpu-1");
    eprintln!(
        "dra env: rule deleted, the pinned pod got gpu-1 and runs in {} ms",
        ms(t)
    );
}

async fn a_faulty_gpu_is_isolated_by_a_device_taint_rule_and_only_its_job_restarts(
    cp: &'static ControlPlane,
) {
    let t = Instant::now();
    // Two nodes: the second publishes the same device names in its own
    // pool (a rule must select by pool), and with two the breaker's 50%
    // would let a wrongful cordon of the first through.
    let (bed, ctl, n, ns) = gpu_bed(cp, &device_isolation_policy()).await;
    let names = bed.cluster.node_names();
    let policy = Api::<DynamicObject>::namespaced_with(
        bed.client(),
        &bed.root(),
        &kube::discovery::ApiResource {
            group: "rebound.dev".into(),
            version: "v1alpha1".into(),
            api_version: "rebound.dev/v1alpha1".into(),
            kind: "RecoveryPolicy".into(),
            plural: "recoverypolicies".into(),
        },
    )
    .get("default")
    .await
    .expect("the root policy");
    let isolation = policy.data["spec"]["nodeActions"]["isolation"].clone();
    eprintln!("dra: the root policy's nodeActions.isolation as served: {isolation}");
    eprintln!("dra: bed, slices, controller in {} ms", ms(t));

    // Fillers on gpu-0, 1, 2, 4 and job-b on gpu-5; job-a, unpinned and
    // last, can only get gpu-3.
    let t = Instant::now();
    for k in [0, 1, 2, 4] {
        gpu_job(&bed, &ns, &format!("filler-{k}"), &n, &pinned(k)).await;
    }
    gpu_job(&bed, &ns, "job-b", &n, &pinned(5)).await;
    for (job, want) in [
        ("filler-0", "gpu-0"),
        ("filler-1", "gpu-1"),
        ("filler-2", "gpu-2"),
        ("filler-4", "gpu-4"),
        ("job-b", "gpu-5"),
    ] {
        let (_, dev) = until(&bed, &ns, &format!("{job} running on {want}"), LONG, || {
            job_gpu(&bed, &ns, job, &n)
        })
        .await;
        assert_eq!(dev, want, "{job}");
    }
    gpu_job(&bed, &ns, "job-a", &n, ANY).await;
    let (a_pod, dev) = until(&bed, &ns, "job-a running", LONG, || {
        job_gpu(&bed, &ns, "job-a", &n)
    })
    .await;
    assert_eq!(dev, "gpu-3", "job-a gets the one free GPU");
    let a_uid = a_pod.uid().expect("uid");
    let (b_pod, _) = job_gpu(&bed, &ns, "job-b", &n)
        .await
        .expect("job-b running");
    let b_uid = b_pod.uid().expect("uid");
    eprintln!("dra: six jobs allocated and running in {} ms", ms(t));

    // gpu-4 free.
    let t = Instant::now();
    Api::<Job>::namespaced(bed.client(), &ns)
        .delete(
            "filler-4",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            },
        )
        .await
        .expect("delete filler-4");
    until(&bed, &ns, "gpu-4 released", LONG, || async {
        (!allocated(&bed, &ns, &n, "gpu-4").await).then_some(())
    })
    .await;
    eprintln!("dra: gpu-4 released in {} ms", ms(t));

    // XID 48 (ResetDevice) on GPU 3 of the node.
    let t = Instant::now();
    xid_device_condition(&bed, &n, "48", "3").await;
    let rule = until(
        &bed,
        &ns,
        "rebound's DeviceTaintRule for gpu-3",
        T,
        || async { rules_for(&bed, &n, "gpu-3").await.into_iter().next() },
    )
    .await;
    eprintln!("dra: rule {} in {} ms", rule.name_any(), ms(t));
    assert_eq!(
        rule.labels().get(MANAGED_BY.0).map(String::as_str),
        Some(MANAGED_BY.1),
        "{rule:?}"
    );
    let taint = &rule.spec.taint;
    assert_eq!(
        (
            taint.key.as_str(),
            taint.value.as_deref(),
            taint.effect.as_str()
        ),
        (FAULT_TAINT, Some("48"), "NoSchedule"),
        "{rule:?}"
    );
    assert!(
        rules_for(&bed, &names[1], "gpu-3").await.is_empty(),
        "the other node's gpu-3 is not isolated"
    );
    assert!(
        !cordoned(&node(&bed, &n).await),
        "device isolation does not cordon the node"
    );

    // job-a, which held gpu-3, restarts; its new pod never gets gpu-3.
    let t = Instant::now();
    until(&bed, &ns, "job-a's JobRestarted Event", T, || async {
        events_with_reason(&bed, &ns, "JobRestarted")
            .await
            .into_iter()
            .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("job-a"))
            .then_some(())
    })
    .await;
    eprintln!("dra: job-a restarted in {} ms", ms(t));
    let (a_new, dev) = until(&bed, &ns, "job-a's new pod running", LONG, || async {
        let (p, dev) = job_gpu(&bed, &ns, "job-a", &n).await?;
        if p.uid().as_deref() == Some(a_uid.as_str()) {
            return None;
        }
        assert_ne!(dev, "gpu-3", "the isolated GPU is allocated to job-a again");
        Some((p, dev))
    })
    .await;
    assert_eq!(dev, "gpu-4", "job-a's new pod gets the free GPU");
    eprintln!(
        "dra: job-a's new pod {} on {dev} in {} ms",
        a_new.name_any(),
        ms(t)
    );

    // After that positive control: job-b (gpu-5) and the fillers, on the
    // same node, are left alone.
    let others: Vec<String> = events_with_reason(&bed, &ns, "JobRestarted")
        .await
        .into_iter()
        .filter_map(|e| e.regarding?.name)
        .filter(|name| name != "job-a")
        .collect();
    assert!(others.is_empty(), "only job-a restarts: {others:?}");
    let (b_now, dev) = job_gpu(&bed, &ns, "job-b", &n)
        .await
        .expect("job-b still running");
    assert_eq!(
        (b_now.uid().as_deref(), dev.as_str()),
        (Some(b_uid.as_str()), "gpu-5"),
        "job-b keeps its pod and its GPU"
    );
    let b_failed = Api::<Job>::namespaced(bed.client(), &ns)
        .get("job-b")
        .await
        .expect("job-b")
        .status
        .and_then(|s| s.failed)
        .unwrap_or(0);
    assert_eq!(b_failed, 0, "no pod of job-b was deleted");

    // The rule keeps new allocations off gpu-3 while the fault lasts:
    // once job-a's old claim let it go, the rule is the only reason a pod
    // pinned to it can wait.
    until(
        &bed,
        &ns,
        "gpu-3 released by job-a's old claim",
        LONG,
        || async { (!allocated(&bed, &ns, &n, "gpu-3").await).then_some(()) },
    )
    .await;
    gpu_pod(&bed, &ns, "probe-3", &n, &pinned(3)).await;
    let why = failed_allocation(&bed, &ns, "probe-3").await;
    assert_eq!(
        bound_node(&bed, &ns, "probe-3").await,
        None,
        "a pod pinned to the isolated GPU waits ({why})"
    );

    // The fault clears: the rule goes, and gpu-3 is allocated again.
    let t = Instant::now();
    bed.cluster
        .set_node_condition(
            &n,
            rebound::fault::wire::GPU_CONDITION,
            "False",
            "Healthy",
            "",
        )
        .await
        .expect("clear the condition");
    until(
        &bed,
        &ns,
        "rebound's DeviceTaintRule for gpu-3 deleted",
        T,
        || async { rules_for(&bed, &n, "gpu-3").await.is_empty().then_some(()) },
    )
    .await;
    eprintln!("dra: rule deleted {} ms after the fault cleared", ms(t));
    let dev = until(&bed, &ns, "the pod pinned to gpu-3 running", LONG, || {
        pod_gpu(&bed, &ns, "probe-3", &n)
    })
    .await;
    assert_eq!(dev, "gpu-3");
    assert!(!cordoned(&node(&bed, &n).await), "never cordoned");
    eprintln!(
        "dra: gpu-3 allocated again {} ms after the fault cleared",
        ms(t)
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// rebound's validation Jobs for `node` in the root namespace.
async fn validation_jobs(bed: &Testbed, node: &str) -> Vec<Job> {
    Api::<Job>::namespaced(bed.client(), &bed.root())
        .list(&ListParams::default().labels(&format!(
            "{}={},rebound.dev/node={node}",
            VALIDATION.0, VALIDATION.1
        )))
        .await
        .expect("validation Jobs")
        .items
}

/// The running pod of Job `job` (by the Job's uid), on `node`.
async fn running_pod_of(bed: &Testbed, job: &Job, node: &str) -> Option<Pod> {
    let uid = job.uid()?;
    running(bed, &bed.root(), &format!("{CONTROLLER_UID}={uid}"))
        .await
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
}

/// The Job `name` of uid `uid` in the root namespace, as it is now.
async fn job_now(bed: &Testbed, name: &str, uid: &str) -> Option<Job> {
    Api::<Job>::namespaced(bed.client(), &bed.root())
        .get_opt(name)
        .await
        .expect("get the validation Job")
        .filter(|j| j.uid().as_deref() == Some(uid))
}

/// The controller's requests on Job `name` (its path) and its creates of
/// Jobs in the root namespace from `since` on: milliseconds after `since`,
/// verb and status, for the timings printed.
fn job_requests(bed: &Testbed, name: &str, since: Instant) -> Vec<(u128, &'static str, u16)> {
    let root = bed.root();
    bed.requests()
        .into_iter()
        .filter(by_controller)
        .filter(|r| {
            r.resource == "jobs"
                && (r.path.contains(name)
                    || (r.verb == "create" && r.namespace.as_deref() == Some(root.as_str())))
        })
        .filter_map(|r| {
            Some((
                r.at.checked_duration_since(since)?.as_millis(),
                r.verb,
                r.status,
            ))
        })
        .collect()
}

/// The reason of the Job's condition `type_` when it is True.
fn condition(job: &Job, type_: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| c.reason.clone().unwrap_or_default())
}

/// The environment of container `container` of the Job's pod template.
fn env_of(job: &Job, container: &str) -> std::collections::BTreeMap<String, String> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| s.containers.clone())
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name == container)
        .and_then(|c| c.env)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

async fn a_faulty_gpu_returns_to_service_only_after_its_validation_job_succeeds(
    cp: &'static ControlPlane,
) {
    let t = Instant::now();
    // Two nodes, as above: the breaker's 50% lets one of them lose a GPU.
    let (bed, ctl, n, ns) = gpu_bed(cp, &validation_policy()).await;
    let root = bed.root();
    // The policy is compiled with its validation (a `job` that is not a
    // JobSpec would make it Ready=False).
    let policies = Api::<DynamicObject>::namespaced_with(
        bed.client(),
        &root,
        &kube::discovery::ApiResource {
            group: "rebound.dev".into(),
            version: "v1alpha1".into(),
            api_version: "rebound.dev/v1alpha1".into(),
            kind: "RecoveryPolicy".into(),
            plural: "recoverypolicies".into(),
        },
    );
    let served = until(&bed, &ns, "the root policy Ready=True", T, || async {
        let p = policies.get_opt("default").await.ok()??;
        let ready = p.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        assert_ne!(
            ready["status"], "False",
            "the root policy with a validation is refused: {ready}"
        );
        (ready["status"] == "True").then(|| p.data["spec"]["nodeActions"].clone())
    })
    .await;
    eprintln!("dra validation: the root policy's nodeActions as served: {served}");
    eprintln!("dra validation: bed, slices, controller in {} ms", ms(t));

    // XID 48 (ResetDevice) on GPU 3: rebound's rule, no cordon.
    let t = Instant::now();
    xid_device_condition(&bed, &n, "48", "3").await;
    let rule = until(
        &bed,
        &ns,
        "rebound's DeviceTaintRule for gpu-3",
        T,
        || async { rules_for(&bed, &n, "gpu-3").await.into_iter().next() },
    )
    .await;
    let rule_name = rule.name_any();
    let rule_uid = rule.uid().expect("the rule's uid");
    eprintln!("dra validation: rule {rule_name} in {} ms", ms(t));
    assert_eq!(
        rule.labels().get(MANAGED_BY.0).map(String::as_str),
        Some(MANAGED_BY.1),
        "{rule:?}"
    );
    assert!(
        !cordoned(&node(&bed, &n).await),
        "device isolation does not cordon the node"
    );
    assert!(
        validation_jobs(&bed, &n).await.is_empty(),
        "no validation while the fault lasts"
    );
    // Nothing holds gpu-3 (no pod asked for it): from here the rule is
    // the only thing that can keep a pod pinned to it waiting.
    assert!(!allocated(&bed, &ns, &n, "gpu-3").await, "gpu-3 is free");
    let the_rule_stays = |when: &'static str| {
        let (bed, n, ns, rule_uid) = (&bed, &n, &ns, &rule_uid);
        async move {
            let rules = rules_for(bed, n, "gpu-3").await;
            if !rules.iter().any(|r| r.uid().as_deref() == Some(rule_uid)) {
                panic!(
                    "the rule for gpu-3 went {when}, before a validation passed; the namespace:{}",
                    describe(bed, ns).await
                );
            }
        }
    };

    // The fault clears: rebound runs the validation on the node.
    let t = Instant::now();
    let cleared = t;
    bed.cluster
        .set_node_condition(
            &n,
            rebound::fault::wire::GPU_CONDITION,
            "False",
            "Healthy",
            "",
        )
        .await
        .expect("clear the condition");
    let job = until(
        &bed,
        &ns,
        "rebound's validation Job for gpu-3",
        T,
        || async { validation_jobs(&bed, &n).await.into_iter().next() },
    )
    .await;
    let job_name = job.name_any();
    let job_uid = job.uid().expect("the Job's uid");
    eprintln!(
        "dra validation: Job {root}/{job_name} made {} ms after the fault cleared",
        ms(t)
    );
    assert!(job_name.starts_with("rebound-validate-"), "{job_name}");
    assert_eq!(
        job.labels().get(MANAGED_BY.0).map(String::as_str),
        Some(MANAGED_BY.1),
        "{:?}",
        job.labels()
    );
    let spec = job.spec.clone().expect("the Job's spec");
    assert_eq!(spec.backoff_limit, Some(0), "backoffLimit");
    assert_eq!(
        spec.active_deadline_seconds,
        Some(600),
        "activeDeadlineSeconds: the policy's timeout"
    );
    let pod_spec = spec.template.spec.clone().expect("the pod template");
    assert_eq!(
        pod_spec.node_name.as_deref(),
        Some(n.as_str()),
        "the validation pod is pinned to the node"
    );
    assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
    let env = env_of(&job, DIAG);
    eprintln!("dra validation: the {DIAG} container's env: {env:?}");
    let want = [
        ("REBOUND_DEVICE", "gpu-3".to_string()),
        ("REBOUND_NODE", n.clone()),
        ("REBOUND_DRA_DEVICE", format!("{DRIVER}/{n}/gpu-3")),
        ("REBOUND_FAULT_CODE", "48".to_string()),
        ("REBOUND_DEVICE_INDEX", "3".to_string()),
        ("REBOUND_DEVICE_UUID", format!("GPU-{n}-3")),
        ("REBOUND_DEVICE_PCI", "0000:1b:00.0".to_string()),
    ];
    for (k, v) in want {
        assert_eq!(env.get(k), Some(&v), "{k} in the {DIAG} container: {env:?}");
    }

    // The real Job controller makes the pod, the simulated kubelet of the
    // node runs it. While it runs the rule stays, and the scheduler
    // refuses a pod pinned to gpu-3.
    let pod = until(
        &bed,
        &ns,
        "the validation pod running on the node",
        LONG,
        || running_pod_of(&bed, &job, &n),
    )
    .await;
    eprintln!(
        "dra validation: pod {} running {} ms after the fault cleared",
        pod.name_any(),
        ms(t)
    );
    the_rule_stays("while the validation runs").await;
    gpu_pod(&bed, &ns, "probe-3", &n, &pinned(3)).await;
    let why = failed_allocation(&bed, &ns, "probe-3").await;
    assert_eq!(
        bound_node(&bed, &ns, "probe-3").await,
        None,
        "a pod pinned to gpu-3 waits while the validation runs ({why})"
    );
    the_rule_stays("while the validation runs").await;
    eprintln!("dra validation: probe-3 refused while validating: {why}");

    // The validation fails (exit 1; backoffLimit 0): the Job controller
    // marks the Job Failed, rebound says so once on the node and keeps
    // the rule.
    let t = Instant::now();
    bed.cluster
        .fail_container(&root, &pod.name_any(), DIAG, 1, "Error")
        .await
        .expect("end the validation container with 1");
    let failed = until(&bed, &ns, "the validation Job Failed", LONG, || async {
        condition(&job_now(&bed, &job_name, &job_uid).await?, "Failed")
    })
    .await;
    eprintln!(
        "dra validation: Job Failed ({failed}) {} ms after its container exited 1",
        ms(t)
    );
    let notes = until(
        &bed,
        &ns,
        "rebound's ValidationFailed Event on the node",
        T,
        || async {
            let (count, notes) = said_on_node(&bed, &n, "ValidationFailed").await;
            (count > 0).then_some(notes)
        },
    )
    .await;
    eprintln!(
        "dra validation: ValidationFailed {} ms after the container exited: {notes:?}",
        ms(t)
    );
    assert!(
        notes
            .iter()
            .any(|s| s.contains(&job_name) && s.contains(&rule_name)),
        "the Event names the Job and the rule: {notes:?}"
    );
    // rebound reads a running validation's Job every 5 s.
    eprintln!(
        "dra validation: rebound's requests on the Job since the fault cleared (ms, verb, status): {:?}",
        job_requests(&bed, &job_name, cleared)
    );
    the_rule_stays("after the validation failed").await;
    assert_eq!(
        bound_node(&bed, &ns, "probe-3").await,
        None,
        "a pod pinned to gpu-3 waits after the validation failed"
    );

    // The Job deleted: rebound runs it again (it reads a failed one every
    // 30 s); the rule stays all along.
    let t = Instant::now();
    Api::<Job>::namespaced(bed.client(), &root)
        .delete(
            &job_name,
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            },
        )
        .await
        .expect("delete the failed validation Job");
    let again = until(
        &bed,
        &ns,
        "the validation Job made again",
        Duration::from_secs(90),
        || async {
            the_rule_stays("while the validation was to run again").await;
            validation_jobs(&bed, &n).await.into_iter().find(|j| {
                j.name_any() == job_name
                    && j.uid().as_deref() != Some(job_uid.as_str())
                    && j.metadata.deletion_timestamp.is_none()
            })
        },
    )
    .await;
    let again_uid = again.uid().expect("the new Job's uid");
    eprintln!(
        "dra validation: Job {job_name} made again {} ms after the failed one was deleted",
        ms(t)
    );
    // How rebound came to it: its reads of the failed Job (every 30 s)
    // until one found it gone (404), then the create.
    eprintln!(
        "dra validation: rebound's requests on the Job since it was deleted (ms, verb, status): {:?}",
        job_requests(&bed, &job_name, t)
    );
    assert_eq!(
        env_of(&again, DIAG)
            .get("REBOUND_DEVICE")
            .map(String::as_str),
        Some("gpu-3")
    );
    let pod = until(
        &bed,
        &ns,
        "the new validation pod running on the node",
        LONG,
        || running_pod_of(&bed, &again, &n),
    )
    .await;
    eprintln!(
        "dra validation: new pod {} running {} ms after the failed Job was deleted",
        pod.name_any(),
        ms(t)
    );
    the_rule_stays("while the second validation runs").await;
    assert_eq!(
        bound_node(&bed, &ns, "probe-3").await,
        None,
        "a pod pinned to gpu-3 waits while the second validation runs"
    );

    // This one passes (exit 0): only now does the rule go, and gpu-3 is
    // allocated again.
    let t = Instant::now();
    bed.cluster
        .fail_container(&root, &pod.name_any(), DIAG, 0, "Completed")
        .await
        .expect("end the validation container with 0");
    until(
        &bed,
        &ns,
        "the new validation Job succeeded",
        LONG,
        || async {
            let j = job_now(&bed, &job_name, &again_uid).await?;
            (j.status?.succeeded.unwrap_or(0) >= 1).then_some(())
        },
    )
    .await;
    eprintln!(
        "dra validation: Job succeeded {} ms after its container exited 0",
        ms(t)
    );
    let t2 = Instant::now();
    until(
        &bed,
        &ns,
        "rebound's DeviceTaintRule for gpu-3 deleted",
        T,
        || async { rules_for(&bed, &n, "gpu-3").await.is_empty().then_some(()) },
    )
    .await;
    eprintln!(
        "dra validation: rule deleted {} ms after the Job succeeded",
        ms(t2)
    );
    let dev = until(&bed, &ns, "the pod pinned to gpu-3 running", LONG, || {
        pod_gpu(&bed, &ns, "probe-3", &n)
    })
    .await;
    assert_eq!(dev, "gpu-3");
    eprintln!(
        "dra validation: gpu-3 allocated again {} ms after the validation passed",
        ms(t)
    );
    let returned = until(
        &bed,
        &ns,
        "rebound's DeviceReturned Event on the node",
        T,
        || async {
            let (count, notes) = said_on_node(&bed, &n, "DeviceReturned").await;
            (count > 0).then_some(notes)
        },
    )
    .await;
    eprintln!("dra validation: DeviceReturned: {returned:?}");
    let (failures, notes) = said_on_node(&bed, &n, "ValidationFailed").await;
    assert_eq!(failures, 1, "one ValidationFailed Event: {notes:?}");
    assert!(!cordoned(&node(&bed, &n).await), "never cordoned");
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

dra!(a_hand_made_device_taint_rule_keeps_new_allocations_off_its_gpu);
dra!(a_faulty_gpu_is_isolated_by_a_device_taint_rule_and_only_its_job_restarts);
dra!(a_faulty_gpu_returns_to_service_only_after_its_validation_job_succeeds);
