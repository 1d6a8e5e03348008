//! In-place restarts on a real kubelet: the real control plane, a real
//! node beside it (kubelet v1.36.2, containerd, runc: crates/rebound-sim/src/envtest/node.rs)
//! and the real `rebound restart-agent` in every pod, built into an image
//! by the test bed. What the simulated kubelet assumes is checked here
//! against the real one: the agent's exit code triggers
//! `RestartAllContainers`, the pod keeps its uid, every container's
//! restart count goes up, the pod shows `AllContainersRestarting`, and the
//! startup-probe barrier holds the workers until rebound releases the
//! generation.
//!
//! Real server only. The pods use the host's network (no pod network
//! here), so each pod of a job needs its own probe port: the Volcano Job
//! has one task per pod, the batch Job one pod.

use super::real_node_setup::reset;
pub(super) use super::real_node_setup::{agent_rbac, wait_long};
use super::tiers::{
    Kind, TIERS, agent_restarts, destructive, job_annotations, job_writes, ready, uid,
    worker_restarts,
};
use super::*;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::PostParams;
use rebound::inplace::inject::{InjectOptions, inject_document};
use rebound::inplace::{AGENT_CONTAINER, GENERATION_ANNOTATION, RELEASED_ANNOTATION};
use rebound_sim::envtest::node::{REBOUND_IMAGE, RealNode, shared_node};
use rebound_sim::proxy::Proxy;
use rebound_sim::testbed::Server;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Runs `async fn $name(node: &'static RealNode)` as `$name::real_node`
/// when a real server and a real node are there (see [`real_node_or_skip`]).
macro_rules! real_node {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real_node() {
                let _watchdog = $crate::watchdog::start();
                if let Some(node) = $crate::e2e::real_node::real_node_or_skip(module_path!()).await
                {
                    let t = std::time::Instant::now();
                    rebound_sim::testbed::check_restart_endings(super::$name(node)).await;
                    eprintln!("{}::real_node took {:?}", module_path!(), t.elapsed());
                }
            }
        }
    };
}

/// The process's real node (started on first use), or `None` after
/// printing why there is none; with `REBOUND_REQUIRE_REAL_SERVER=1` (CI) a
/// missing node fails the test instead.
pub(super) async fn real_node_or_skip(test: &str) -> Option<&'static RealNode> {
    if !real_server_or_skip(test) {
        return None;
    }
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_rebound"));
    let r = tokio::task::spawn_blocking(move || shared_node(bin))
        .await
        .unwrap_or_else(|e| Err(format!("the node's start panicked: {e}")));
    match r {
        Ok(n) => {
            reset(n).await;
            Some(n)
        }
        Err(why) if rebound_sim::envtest::real_server_required() => panic!(
            "{test}: no real node: {why} ({} is set)",
            rebound_sim::envtest::REQUIRE_ENV
        ),
        Err(why) => {
            eprintln!("SKIPPED on the real node: {test}: {why}");
            None
        }
    }
}

/// How long a real pod may take to start or restart (containerd and the
/// kubelet share two cores with the control plane).
pub(super) const RT: Duration = Duration::from_secs(60);

/// The API server's port, for the agents (no kube-proxy: they reach it
/// over the host's loopback).
pub(super) fn api_port() -> String {
    rebound_sim::envtest::shared()
        .ok()
        .and_then(|cp| cp.url().rsplit(':').next().map(str::to_owned))
        .unwrap_or_default()
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A pod template for the real node: one worker (`/pause` of the
/// rebound image: runs until stopped), host network, bound to `node`.
pub(super) fn template(node: &str, policy: &str) -> Value {
    json!({
        "metadata": {"labels": {OPT_IN.0: OPT_IN.1}},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "restartPolicy": policy,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "worker", "image": REBOUND_IMAGE, "command": ["/pause"]}],
        },
    })
}

/// Wires the template at `ptr` of `job` as `rebound inject` does, with the
/// agent on `port`, and points its agent at the API server's loopback
/// address.
fn wire_template(job: &mut Value, ptr: &str, port: u16, image: &str) {
    // Each template separately: each pod needs its own probe port.
    let opts = InjectOptions {
        image: image.to_string(),
        probe_port: port,
        ..InjectOptions::default()
    };
    inject_document(job, &opts, "job").expect("rebound inject");
    let spec = job.pointer_mut(ptr).expect("the template's spec");
    let agent = spec["initContainers"]
        .as_array_mut()
        .and_then(|a| a.iter_mut().find(|c| c["name"] == AGENT_CONTAINER))
        .expect("the agent");
    let env = agent["env"].as_array_mut().expect("the agent's env");
    env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": api_port()}));
}

/// Creates the job `j` of `kind` in `ns` with `pods` pods on `node`,
/// pod `i`'s agent from `agent_image(i)`.
pub(super) async fn create_job(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
    pods: usize,
    node: &str,
    agent_image: impl Fn(usize) -> String,
) {
    create_job_adjusted(bed, ns, kind, pods, node, agent_image, |_| {}).await;
}

/// [`create_job`], each wired pod template's spec then changed by
/// `adjust`.
pub(super) async fn create_job_adjusted(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
    pods: usize,
    node: &str,
    agent_image: impl Fn(usize) -> String,
    adjust: impl Fn(&mut Value),
) {
    let labels = json!({OPT_IN.0: OPT_IN.1});
    let mut job = match kind {
        Kind::Volcano => {
            let tasks: Vec<Value> = (0..pods)
                .map(|i| {
                    let mut t = template(node, "Never");
                    t["metadata"]["name"] = json!(format!("w{i}"));
                    json!({"name": format!("w{i}"), "replicas": 1, "template": t})
                })
                .collect();
            json!({
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": super::tiers::JOB, "namespace": ns, "labels": labels},
                "spec": {"schedulerName": "volcano", "queue": "default",
                         "minAvailable": pods, "tasks": tasks},
            })
        }
        Kind::Batch => {
            assert_eq!(pods, 1, "host network: one pod per template");
            json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": super::tiers::JOB, "namespace": ns, "labels": labels},
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                         "template": template(node, "Never")},
            })
        }
        Kind::JobSet | Kind::PyTorch => panic!("not wired by inject on the real node"),
    };
    // `rebound inject` wires every template alike; each gets its port by
    // wiring it alone.
    if let Kind::Volcano = kind {
        let tasks = job["spec"]["tasks"].take();
        let mut wired = Vec::new();
        for (i, t) in tasks.as_array().into_iter().flatten().enumerate() {
            let mut one = job.clone();
            one["spec"]["tasks"] = json!([t]);
            wire_template(
                &mut one,
                "/spec/tasks/0/template/spec",
                free_port(),
                &agent_image(i),
            );
            if let Some(spec) = one.pointer_mut("/spec/tasks/0/template/spec") {
                adjust(spec);
            }
            wired.push(one["spec"]["tasks"][0].take());
        }
        job["spec"]["tasks"] = json!(wired);
    } else {
        wire_template(
            &mut job,
            "/spec/template/spec",
            free_port(),
            &agent_image(0),
        );
        if let Some(spec) = job.pointer_mut("/spec/template/spec") {
            adjust(spec);
        }
    }
    let obj: kube::api::DynamicObject = serde_json::from_value(job).expect("job object");
    Api::<kube::api::DynamicObject>::namespaced_with(bed.client(), ns, &kind.resource())
        .create(&PostParams::default(), &obj)
        .await
        .expect("create the job");
}

/// Pod condition types seen by a watch of the job's pods, per pod.
pub(super) fn watch_conditions(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
) -> Arc<Mutex<BTreeSet<(String, String)>>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s = seen.clone();
    let pods: Api<Pod> = Api::namespaced(bed.client(), ns);
    tokio::spawn(async move {
        let mut w = watcher(pods, watcher::Config::default().labels(kind.selector()))
            .applied_objects()
            .boxed();
        while let Some(Ok(p)) = w.next().await {
            for c in p.status.iter().flat_map(|s| s.conditions.iter().flatten()) {
                if c.status == "True" {
                    s.lock()
                        .expect("seen")
                        .insert((p.name_any(), c.type_.clone()));
                }
            }
        }
    });
    seen
}

/// The job's pods, running and ready on the real node.
pub(super) async fn running_on(
    bed: &Testbed,
    ns: &str,
    kind: Kind,
    n: usize,
    node: &RealNode,
) -> Vec<Pod> {
    wait_long(
        "the job's pods running and ready on the real node",
        RT,
        node,
        || async {
            let p = running(bed, ns, kind.selector()).await;
            (p.len() == n && p.iter().all(ready)).then_some(p)
        },
    )
    .await
}

/// A fault under a wired job's pods on the real node: rebound's two job
/// writes, the real agents exit, the real kubelet restarts every container
/// of every pod in place, the barrier releases, the workers run again.
async fn in_place_on_the_real_kubelet(
    node: &'static RealNode,
    kind: Kind,
    pods: usize,
    xid: &str,
    second: Option<&str>,
) {
    let (bed, ctl) = bed_with(Server::Real, 1, TIERS, None).await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    create_job(&bed, &ml, kind, pods, node.name(), |_| REBOUND_IMAGE.into()).await;
    let fault = Fault {
        xid,
        second,
        cut: None,
    };
    restarts_in_place_on(node, &bed, &ml, kind, pods, fault).await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// The fault of [`restarts_in_place_on`].
pub(super) struct Fault<'a> {
    /// The XID written on the node.
    pub(super) xid: &'a str,
    /// A second XID, written while the job restarts.
    pub(super) second: Option<&'a str>,
    /// The agents' own proxy to the API server, whose connections are cut
    /// for this long from just before the fault.
    pub(super) cut: Option<(&'a Proxy, Duration)>,
}

/// The checks of an in-place restart on the real node, for the job `j`
/// of `kind` with `pods` pods already created in `ml`: the fault, rebound's
/// two writes, every container of every pod restarted in place (same
/// pods, restart counts +1, `AllContainersRestarting` seen), the workers
/// running again only after the release, nothing deleted; then a wired
/// pod's quick stop on delete.
pub(super) async fn restarts_in_place_on(
    node: &'static RealNode,
    bed: &Testbed,
    ml: &str,
    kind: Kind,
    pods: usize,
    fault: Fault<'_>,
) {
    let Fault { xid, second, cut } = fault;
    let (bed, ml) = (bed, ml.to_owned());
    let before = running_on(bed, &ml, kind, pods, node).await;
    let restarts: BTreeMap<String, i32> = before
        .iter()
        .map(|p| (p.name_any(), worker_restarts(p)))
        .collect();
    let order = super::tiers::watch_order(bed, &ml, kind, restarts);
    let conditions = watch_conditions(bed, &ml, kind);
    let cut_until = cut.map(|(proxy, d)| {
        // The agents' watches end and their reconnects are refused.
        proxy.inject().refuse_connections(d);
        Instant::now() + d
    });
    let t0 = Instant::now();
    xid_condition(bed, node.name(), xid).await;
    if let Some(until) = cut_until {
        wait("generation 1 raised", T, || async {
            let a = job_annotations(bed, &ml, kind).await;
            (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
        })
        .await;
        assert!(
            Instant::now() + Duration::from_secs(2) < until,
            "the generation came too late to be missed by the cut agents"
        );
        // Cut off, no agent can see the new generation: no pod restarts.
        while Instant::now() + Duration::from_millis(300) < until {
            for p in running(bed, &ml, kind.selector()).await {
                let old = before.iter().find(|b| uid(b) == uid(&p));
                assert_eq!(
                    Some(agent_restarts(&p)),
                    old.map(agent_restarts),
                    "{}: restarted while its agent was cut off",
                    p.name_any()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    if let Some(code) = second {
        // A second fault under the job while it restarts (cooldown 0s:
        // only the recovery in progress stops another one).
        wait("generation 1 raised", T, || async {
            let a = job_annotations(bed, &ml, kind).await;
            (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
        })
        .await;
        xid_condition(bed, node.name(), code).await;
        let a = job_annotations(bed, &ml, kind).await;
        assert_ne!(
            a.get(RELEASED_ANNOTATION).map(String::as_str),
            Some("1"),
            "the second fault came after the release: the restart was over before it"
        );
    }
    let after = wait_long(
        "every pod restarted in place and released",
        RT,
        node,
        || async {
            let a = job_annotations(bed, &ml, kind).await;
            let p = running(bed, &ml, kind.selector()).await;
            (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")
                && a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1")
                && p.len() == pods
                && p.iter().all(|p| ready(p) && agent_restarts(p) >= 1))
            .then_some(p)
        },
    )
    .await;
    eprintln!(
        "fault → every pod Running and Ready again: {:?}",
        t0.elapsed()
    );
    // Same pods, each container restarted once, nothing deleted.
    let was: BTreeSet<String> = before.iter().map(uid).collect();
    let now: BTreeSet<String> = after.iter().map(uid).collect();
    assert_eq!(now, was, "the same pods");
    for p in &after {
        let old = before
            .iter()
            .find(|b| uid(b) == uid(p))
            .expect("the pod was there before");
        assert_eq!(
            agent_restarts(p),
            agent_restarts(old) + 1,
            "{}: agent",
            p.name_any()
        );
        assert_eq!(
            worker_restarts(p),
            worker_restarts(old) + 1,
            "{}: worker",
            p.name_any()
        );
    }
    assert_eq!(destructive(bed), Vec::<String>::new());
    let seen = conditions.lock().expect("seen").clone();
    for p in &after {
        assert!(
            seen.contains(&(p.name_any(), "AllContainersRestarting".into())),
            "{}: AllContainersRestarting never seen True: {seen:?}",
            p.name_any()
        );
    }
    wait("both writes logged", T, || async {
        (job_writes(bed, kind) >= 2).then_some(())
    })
    .await;
    assert_eq!(job_writes(bed, kind), 2, "one record, one release");
    // Every worker ran again only after the release (resourceVersions of
    // one etcd: which came first).
    let (released, first_worker) = wait("every worker seen running again", T, || async {
        order.lock().expect("seen").release_then_workers(pods)
    })
    .await;
    assert!(
        first_worker > released,
        "a worker ran again (rv {first_worker}) before the barrier was released (rv {released})"
    );
    if second.is_some() {
        // Let the second fault be decided: still one recovery.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let a = job_annotations(bed, &ml, kind).await;
        assert_eq!(
            a.get("rebound.dev/restart-count").map(String::as_str),
            Some("1")
        );
        assert_eq!(a.get(GENERATION_ANNOTATION).map(String::as_str), Some("1"));
        assert_eq!(job_writes(bed, kind), 2, "one record, one release");
    }
    // A wired pod stops at once when deleted: its agent ends on SIGTERM
    // (as its container's PID 1 it has no default action for it) instead
    // of holding the pod for the whole grace period.
    let gone = &after[0];
    let t = Instant::now();
    Api::<Pod>::namespaced(bed.client(), &ml)
        .delete(
            &gone.name_any(),
            &kube::api::DeleteParams::default().grace_period(30),
        )
        .await
        .expect("delete a pod");
    wait_long("the deleted pod gone", RT, node, || async {
        let p = Api::<Pod>::namespaced(bed.client(), &ml)
            .get_opt(&gone.name_any())
            .await
            .expect("get the pod");
        p.is_none_or(|p| uid(&p) != uid(gone)).then_some(())
    })
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "a deleted wired pod took {:?} to stop (grace period 30 s)",
        t.elapsed()
    );
    if let (Some((proxy, _)), Some(until)) = (cut, cut_until) {
        // The agents caught up by reading their job again once they could:
        // the first request through their proxy after the cut.
        let after_cut: Vec<RequestRecord> = proxy
            .requests()
            .into_iter()
            .filter(|r| r.at >= until)
            .collect();
        let first = after_cut
            .iter()
            .min_by_key(|r| r.at)
            .map(|r| (r.verb, r.name.clone()));
        assert_eq!(
            first,
            Some(("get", Some(super::tiers::JOB.to_owned()))),
            "the agents' first request after the cut"
        );
    }
    super::real_node_faults::clear_fault(bed, node).await;
}

/// With a second fault during the restart: still one recovery.
async fn a_wired_volcano_job_restarts_in_place_on_a_real_kubelet_once_for_two_faults(
    node: &'static RealNode,
) {
    in_place_on_the_real_kubelet(node, Kind::Volcano, 2, "13", Some("43")).await;
}

async fn a_wired_batch_job_restarts_in_place_on_a_real_kubelet(node: &'static RealNode) {
    in_place_on_the_real_kubelet(node, Kind::Batch, 1, "31", None).await;
}

real_node!(a_wired_volcano_job_restarts_in_place_on_a_real_kubelet_once_for_two_faults);
real_node!(a_wired_batch_job_restarts_in_place_on_a_real_kubelet);
