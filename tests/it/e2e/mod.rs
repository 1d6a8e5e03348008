//! End-to-end tests: the real controller against a cluster, one test per
//! behaviour. Assertions read the cluster (objects and the request log),
//! never the controller's internals.
//!
//! Every test runs twice ([`e2e!`]): `<test>::embedded` on the embedded
//! server, `<test>::real` on a real kube-apiserver — the process's envtest
//! control plane (assets from `REBOUND_TEST_ASSETS` or `../shared/k8s`), or
//! the cluster of `REBOUND_E2E_KUBECONFIG` — with fake nodes, simulated
//! operators and per-run namespaces, through the test bed's recording,
//! fault-injecting proxy (docs/testing.md). Without a real server the
//! `real` variants print why and pass, unless `REBOUND_REQUIRE_REAL_SERVER=1`.

/// Runs `async fn $name(server: Server)` as two tests, `$name::embedded`
/// and `$name::real`, each with restart endings checked: a bed of the test
/// dropped with a restart that [`every_restart_ends`] did not see end
/// fails it.
macro_rules! e2e {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                let _watchdog = $crate::watchdog::start();
                let t = std::time::Instant::now();
                rebound_sim::testbed::check_restart_endings(super::$name(
                    rebound_sim::testbed::Server::Embedded,
                ))
                .await;
                eprintln!("{}::embedded took {:?}", module_path!(), t.elapsed());
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                let _watchdog = $crate::watchdog::start();
                if $crate::e2e::real_server_or_skip(module_path!()) {
                    let t = std::time::Instant::now();
                    rebound_sim::testbed::check_restart_endings(super::$name(
                        rebound_sim::testbed::Server::Real,
                    ))
                    .await;
                    // With the wait for the bed's turn (one real bed at a time).
                    eprintln!("{}::real took {:?}", module_path!(), t.elapsed());
                }
            }
        }
    };
}

mod admission;
mod admission_policy;
mod ascend_ranktable;
mod ascend_view;
mod ascend_view_scale;
mod batch_job_parity;
mod bounds;
mod dra_devices;
mod endings;
mod event_series;
mod external;
mod hang;
mod held_cordon_real;
mod install;
mod jobs;
mod nodes;
mod operator_restarts;
mod operators;
mod own_plane;
mod policies;
mod proxy;
mod rbac;
#[macro_use]
mod real_node;
mod real_node_admission;
mod real_node_costs;
mod real_node_faults;
mod real_node_setup;
mod real_node_sim;
mod real_operators_sim;
mod recovery_core;
mod resilience;
mod tiers;
mod tiers_jobs;
mod trainjob;
mod volcano_restarts;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, ListParams};
use rebound::controller::{ControllerArgs, ControllerHandle};
use rebound_sim::RequestRecord;
use rebound_sim::cluster::{SimConfig, pod_running};
pub use rebound_sim::testbed::{Server, Testbed};
use std::future::Future;
use std::time::{Duration, Instant};

pub const OPT_IN: (&str, &str) = ("kcover.io/cascading-recovery", "true");

/// Classifications and the root policy every test starts from: small and
/// explicit, so the tests do not depend on how the samples are tuned.
pub const BASE: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: FaultClassification
metadata: {name: xid}
spec:
  source: NvidiaXid
  rules:
  - {name: bus, codes: ["79"], level: Separate}
  - {name: ecc, codes: ["48"], level: ResetDevice}
  - {name: degrading, codes: ["999"], level: PreSeparate}
  - {name: app, codes: ["13"], level: RestartJob}
  escalations:
  - {codes: ["13"], times: 2, within: 24h, level: ResetDevice}
  defaultLevel: RestartJob
---
apiVersion: rebound.dev/v1alpha1
kind: FaultClassification
metadata: {name: exits}
spec:
  source: PodExit
  rules:
  - {name: term, codes: ["143"], level: Ignore}
  defaultLevel: RestartJob
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: default, namespace: rebound-system}
spec:
  selector:
    matchLabels: {kcover.io/cascading-recovery: "true"}
  cooldown: 1m
  nodeActions:
    maxSeparated: "50%"
    breakerWindow: 5m
"#;

/// Whether a `real` variant can run: true when a real API server is there;
/// else prints why and returns false, or panics when
/// `REBOUND_REQUIRE_REAL_SERVER=1` (CI), so nothing skips unnoticed.
pub fn real_server_or_skip(test: &str) -> bool {
    match Testbed::real_server_unavailable() {
        None => true,
        Some(why) if rebound_sim::envtest::real_server_required() => {
            panic!(
                "{test}: {why} ({} is set)",
                rebound_sim::envtest::REQUIRE_ENV
            )
        }
        Some(why) => {
            eprintln!("SKIPPED on the real server: {test}: {why}");
            false
        }
    }
}

/// With `REBOUND_E2E_LOG` set (a tracing filter such as `rebound=debug`),
/// the controller's and the bed's logs go to the test's output.
fn init_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("REBOUND_E2E_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}

/// A bed of `nodes` nodes on `server` (panics if it cannot be made).
pub async fn bed(server: Server, cfg: SimConfig) -> Testbed {
    init_logs();
    Testbed::on(server, cfg).await.expect("test bed")
}

/// A cluster of `nodes` nodes with the base objects and a leading controller.
pub async fn bed_with(
    server: Server,
    nodes: usize,
    extra: &str,
    cfg: Option<SimConfig>,
) -> (Testbed, ControllerHandle) {
    bed_with_args(server, nodes, extra, cfg, |_| {}).await
}

/// [`bed_with`] with controller flags changed by `f`.
pub async fn bed_with_args(
    server: Server,
    nodes: usize,
    extra: &str,
    cfg: Option<SimConfig>,
    f: impl FnOnce(&mut ControllerArgs),
) -> (Testbed, ControllerHandle) {
    let cfg = cfg.unwrap_or(SimConfig {
        nodes,
        ..SimConfig::default()
    });
    let bed = bed(server, SimConfig { nodes, ..cfg }).await;
    ready_bed_with_args(bed, extra, f).await
}

/// The base objects, the test namespaces and a leading controller on a
/// bed made by the caller.
pub async fn ready_bed(bed: Testbed, extra: &str) -> (Testbed, ControllerHandle) {
    ready_bed_with_args(bed, extra, |_| {}).await
}

/// [`ready_bed`] with controller flags changed by `f`.
pub async fn ready_bed_with_args(
    bed: Testbed,
    extra: &str,
    f: impl FnOnce(&mut ControllerArgs),
) -> (Testbed, ControllerHandle) {
    for ns in ["ml", "team-a", "team-b"] {
        bed.ensure_namespace(ns).await.expect("namespace");
    }
    bed.apply_yaml(BASE).await.expect("base objects");
    if !extra.is_empty() {
        bed.apply_yaml(extra).await.expect("extra objects");
    }
    let ctl = bed
        .start_controller(args(&bed, f))
        .await
        .expect("controller");
    (bed, ctl)
}

/// The root policy of [`BASE`] with `from` replaced by `to` (which must
/// change it), as the `extra` of a bed that replaces BASE's.
pub fn root_policy_with(from: &str, to: &str) -> String {
    let policy = BASE
        .split("---")
        .find(|d| d.contains("kind: RecoveryPolicy"))
        .expect("the root policy in BASE");
    let out = policy.replace(from, to);
    assert_ne!(out, policy, "BASE's root policy has {from:?}");
    out
}

/// [`wait`], and on a timeout also `last()`: what was last seen.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    last: impl Fn() -> String,
) -> T
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
            let seen = last();
            if seen.is_empty() {
                panic!("timed out after {timeout:?} waiting for: {what}");
            }
            panic!("timed out after {timeout:?} waiting for: {what}; last seen: {seen}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `check` returns Some, or panic saying what did not happen.
pub async fn wait<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for(what, timeout, check, String::new).await
}

/// Whether a logged request is the controller's (by its User-Agent, which
/// the proxy passes through), not the simulated actors' or the test's.
pub fn by_controller(r: &RequestRecord) -> bool {
    r.user_agent
        .as_deref()
        .is_some_and(|u| u.starts_with("rebound-controller/"))
}

/// The controller's mark on a job that a restart's ending was told
/// (`rebound.dev/restart-ended`): written once the job runs again, not a
/// write of the restart itself.
pub fn ending_mark(r: &RequestRecord) -> bool {
    r.query
        .contains(rebound::controller::executor::ENDED_FIELD_MANAGER)
}

/// The controller's successful requests matching verb, resource (no
/// subresource) and a query fragment.
pub fn requests(bed: &Testbed, verb: &str, resource: &str, query_has: &str) -> Vec<RequestRecord> {
    bed.requests()
        .into_iter()
        .filter(by_controller)
        .filter(|r| {
            r.verb == verb && r.resource == resource && r.subresource.is_empty() && r.status < 300
        })
        .filter(|r| urldecode(&r.query).contains(query_has))
        .collect()
}

/// A job's `rebound.dev/restart-count` (0 when never restarted): the
/// restart count that also works on a shared cluster, without the request
/// log.
pub async fn restart_count(bed: &Testbed, ns: &str, job: &str) -> u64 {
    pytorchjob(bed, ns, job)
        .await
        .metadata
        .annotations
        .unwrap_or_default()
        .get("rebound.dev/restart-count")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Restarts of PyTorchJob `ns/job`, counted by the requests that made them
/// (exactly one deletecollection per restart) in the request log, which
/// both kinds of bed keep.
pub async fn job_restarts(bed: &Testbed, ns: &str, job: &str) -> usize {
    restarts_in(bed, ns, PT, job)
}

/// Job restarts by deletecollection in `ns` for a job-name label value.
pub fn restarts_in(bed: &Testbed, ns: &str, label: &str, job: &str) -> usize {
    requests(bed, "deletecollection", "pods", &format!("{label}={job}"))
        .iter()
        .filter(|r| r.namespace.as_deref() == Some(ns))
        .count()
}

pub fn urldecode(s: &str) -> String {
    rebound_sim::bench::decode_query(s)
}

/// Running pods of a selector in a namespace.
pub async fn running(bed: &Testbed, ns: &str, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(bed.client(), ns);
    api.list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items.into_iter().filter(pod_running).collect())
        .unwrap_or_default()
}

/// Create an opted-in PyTorchJob (one master, `workers` workers), wait
/// until all its pods run, and return its pod selector.
pub async fn running_pytorchjob(bed: &Testbed, ns: &str, name: &str, workers: u32) -> String {
    bed.cluster
        .create_pytorchjob(ns, name, workers, &[OPT_IN])
        .await
        .expect("create PyTorchJob");
    let sel = format!("{PT}={name}");
    let n = workers as usize + 1;
    wait(&format!("{ns}/{name} running"), T, || async {
        (running(bed, ns, &sel).await.len() >= n).then_some(())
    })
    .await;
    sel
}

/// The node a pod of the selector runs on.
pub async fn node_of(bed: &Testbed, ns: &str, selector: &str) -> String {
    running(bed, ns, selector)
        .await
        .iter()
        .find_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .expect("a running pod with a node")
}

pub async fn node(bed: &Testbed, name: &str) -> Node {
    Api::<Node>::all(bed.client())
        .get(name)
        .await
        .expect("node")
}

pub fn cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

/// The API resource of PyTorchJobs.
pub fn pytorchjob_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PyTorchJob".into(),
        plural: "pytorchjobs".into(),
    }
}

/// A PyTorchJob's annotations.
pub async fn pytorchjob(bed: &Testbed, ns: &str, name: &str) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(bed.client(), ns, &pytorchjob_resource())
        .get(name)
        .await
        .expect("job")
}

/// Decisions of the controller with this outcome so far (a skip reason
/// such as `Cooldown`, or `acted`), from its metrics: the positive
/// control a negative assertion waits for (the fault was decided).
pub fn decisions(ctl: &ControllerHandle, outcome: &str) -> f64 {
    let label = format!("outcome=\"{outcome}\"");
    ctl.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("rebound_decisions_total") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Set an XID on a node the way the agent does: a GpuFault condition line.
pub async fn xid_condition(bed: &Testbed, node: &str, code: &str) {
    xid_device_condition(bed, node, code, "0").await;
}

/// [`xid_condition`] on device `device` of the node (the GPU's index as
/// the agent reports it).
pub async fn xid_device_condition(bed: &Testbed, node: &str, code: &str, device: &str) {
    use rebound::fault::wire::{self, WireFault};
    let msg = wire::format_condition_message(&[WireFault {
        source: "NvidiaXid".into(),
        code: code.into(),
        device: Some(device.into()),
        ..Default::default()
    }]);
    bed.cluster
        .set_node_condition(node, wire::GPU_CONDITION, "True", "NvidiaXid", &msg)
        .await
        .expect("condition");
}

/// The notes of the `JobRestarted` Events of a namespace, once there is one.
pub async fn restarted_notes(bed: &Testbed, ns: &str) -> Vec<String> {
    wait("the JobRestarted Event", T, || async {
        let n: Vec<String> = events_with_reason(bed, ns, "JobRestarted")
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        (!n.is_empty()).then_some(n)
    })
    .await
}

/// The notes of the JobResumed and JobNotResumed Events of job `name`
/// (each Event counted as often as its series says).
pub async fn ends(bed: &Testbed, ns: &str, name: &str) -> (Vec<String>, Vec<String>) {
    let mut out = (Vec::new(), Vec::new());
    for (reason, into) in [("JobResumed", &mut out.0), ("JobNotResumed", &mut out.1)] {
        for e in events_with_reason(bed, ns, reason).await {
            if e.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
                continue;
            }
            let times = e.series.as_ref().map_or(1, |s| s.count.max(1));
            for _ in 0..times {
                into.push(e.note.clone().unwrap_or_default());
            }
        }
    }
    out
}

/// Waits until job `name` has `n` JobResumed Events and no JobNotResumed:
/// every restart followed until the job trains again. Their notes.
pub async fn resumed(bed: &Testbed, ns: &str, name: &str, n: usize) -> Vec<String> {
    wait(&format!("{name}: {n} JobResumed"), T, || async {
        let (resumed, not) = ends(bed, ns, name).await;
        assert!(not.is_empty(), "{name} not resumed: {not:?}");
        (resumed.len() >= n).then_some(resumed)
    })
    .await
}

/// Waits until every restart rebound made in the bed ended in one
/// `JobResumed` or `JobNotResumed` (issue 32); call it while the
/// controller runs, after the test's last restart ([`e2e!`] fails a test
/// whose bed saw a restart this did not see end).
pub async fn every_restart_ends(bed: &Testbed) {
    every_restart_ends_within(bed, T + T / 2).await;
}

/// [`every_restart_ends`] for jobs that take longer than the suite's bound
/// to run again; on a timeout it also says how their pods are.
pub async fn every_restart_ends_within(bed: &Testbed, timeout: Duration) {
    if let Err(e) = bed.every_restart_ends(timeout).await {
        let mut pods = Vec::new();
        for ns in ["ml", "team-a", "team-b"].map(|n| bed.ns(n)) {
            for p in Api::<Pod>::namespaced(bed.client(), &ns)
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                pods.push(format!(
                    "{ns}/{} {} {:?}{}{} finalizers {:?} grace {:?}",
                    p.metadata.name.clone().unwrap_or_default(),
                    p.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.to_string())
                        .unwrap_or_default(),
                    phase,
                    if pod_running(&p) { " running" } else { "" },
                    if p.metadata.deletion_timestamp.is_some() {
                        " deleting"
                    } else {
                        ""
                    },
                    p.metadata.finalizers.clone().unwrap_or_default(),
                    p.metadata.deletion_grace_period_seconds,
                ));
            }
        }
        panic!("{e}; pods: {pods:?}");
    }
}

/// The completed events (stage `ResponseComplete`) of a kept API server
/// audit log, as JSON.
pub fn audit_events(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("the kept audit log")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &serde_json::Value| e["stage"] == "ResponseComplete")
        .collect()
}

/// The events.k8s.io Events of a namespace with this reason.
pub async fn events_with_reason(
    bed: &Testbed,
    ns: &str,
    reason: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// The node a pod is bound to.
pub fn node_name(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("the pod is scheduled")
}

/// Controller flags of the test bed with changes.
pub fn args(bed: &Testbed, f: impl FnOnce(&mut ControllerArgs)) -> ControllerArgs {
    let mut a = bed.controller_args();
    f(&mut a);
    a
}

pub const PT: &str = "training.kubeflow.org/job-name";
/// How long a wait allows: generous, since a real API server, etcd and
/// kube-controller-manager share two cores with the rest of the suite.
pub const T: Duration = Duration::from_secs(20);
