//! A held cordon on the real components (issue 32: "a held cordon never
//! leaves a restarted job's pods on the faulty node"), on the real control
//! plane only: a control plane of this module's own (kube-apiserver,
//! kube-controller-manager with the real batch Job controller, and
//! kube-scheduler), the test bed's fake nodes and simulated kubelets on
//! it, and an audit log of the pods' creations and bindings.
//!
//! `a_held_cordon_holds_the_restart_and_the_new_pod_lands_off_the_faulty_node`:
//! the root policy allows one separation per 40 s (`maxSeparated: "1"`,
//! `breakerWindow: 40s`), three nodes A, B, C. A batch Job of one pod,
//! opted in, prefers B (a soft node affinity: kube-scheduler puts the pod
//! on B whenever B is schedulable, so a restart made while B is still
//! schedulable would put the new pod back on B). XID 79 (`Separate`) on A
//! uses the breaker's one separation; XID 79 on B, under the Job's pod,
//! is held: a `BreakerOpen` Event on B, a `RestartSkipped` `CordonHeld`
//! Event on the Job and the decision counted, and while it is held the
//! Job's pod stays where it is, nothing deleted. Once the window has
//! passed B is cordoned and tainted, and only then is the Job restarted
//! (one `deletecollection` by its controller uid, sent in the step that
//! sends B's cordon or later); the Job controller's replacement, after
//! its 10 s failure backoff, is bound by kube-scheduler to C, and no pod
//! of the Job is ever bound to B after the fault (the audit log's
//! bindings), nor to A. The Job ends in `JobResumed`.
//!
//! The embedded server has no kube-scheduler, so there is no
//! `::embedded` variant; without the real components the test prints
//! `SKIPPED on the real server: ...` and passes, unless
//! `REBOUND_REQUIRE_REAL_SERVER=1`.

use super::*;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::PostParams;
use rebound_sim::cluster::SharedCluster;
use rebound_sim::envtest::{ControlPlane, ControlPlaneConfig, resolve_scheduler};
use serde_json::{Value, json};
use std::sync::OnceLock;

const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The breaker's window the test's root policy sets: longer than the Job
/// controller's 10 s failure backoff, so that a restart made while the
/// cordon is held would have its replacement pod bound while the faulty
/// node is still schedulable.
const WINDOW: Duration = Duration::from_secs(40);
/// Longer than [`T`]: a batch Job restarted by rebound waits the Job
/// controller's 10 s failure backoff before its replacement pod is made.
const LONG: Duration = Duration::from_secs(60);
/// The Job.
const JOB: &str = "train";
/// How long the test lets the request log settle once it sees a restart
/// during the hold, before it judges it: the restart must have been sent
/// after B's cordon was answered (rebound restarts once the separation
/// is made, not beside its request).
const SAME_STEP: Duration = Duration::from_secs(1);

/// The API server's audit log: the pods' creations (with the created
/// object, for its name) and bindings (with the Binding, for its node).
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Request
  verbs: [create]
  resources:
  - group: ""
    resources: [pods/binding]
- level: RequestResponse
  verbs: [create]
  resources:
  - group: ""
    resources: [pods]
- level: None
"#;

/// The control plane this test needs, or why its binaries are missing.
fn plane_config() -> Result<ControlPlaneConfig, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cfg = ControlPlaneConfig::resolve().map_err(|e| e.to_string())?;
    cfg.scheduler = Some(resolve_scheduler(root).map_err(|e| e.to_string())?);
    cfg.audit_policy = Some(AUDIT_POLICY.into());
    Ok(cfg)
}

/// This module's control plane (see [`super::own_plane`]).
async fn plane_or_skip(test: &str) -> Option<&'static ControlPlane> {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    super::own_plane::plane_or_skip(test, "with kube-scheduler", &CP, plane_config).await
}

/// A bed of `nodes` fake nodes on the control plane.
async fn plane_bed(cp: &ControlPlane, nodes: usize) -> Testbed {
    super::own_plane::bed_on(cp, nodes).await
}

/// The root policy of [`BASE`] with a breaker of one separation per
/// [`WINDOW`] (a count: absolute, whatever the number of nodes).
fn one_separation_policy() -> String {
    root_policy_with(
        "    maxSeparated: \"50%\"\n    breakerWindow: 5m\n",
        &format!(
            "    maxSeparated: \"1\"\n    breakerWindow: {}s\n",
            WINDOW.as_secs()
        ),
    )
}

/// An opted-in batch Job of one pod for kube-scheduler
/// (`default-scheduler`), the fake nodes' taint tolerated, preferring
/// node `prefer` (a soft affinity: any schedulable node will do).
async fn job_preferring(bed: &Testbed, ns: &str, name: &str, prefer: &str) -> Job {
    let labels = json!({OPT_IN.0: OPT_IN.1});
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6,
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "restartPolicy": "Never",
                     "schedulerName": "default-scheduler",
                     "tolerations": [{"key": SharedCluster::default().taint_key, "operator": "Exists"}],
                     "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                         {"weight": 100, "preference": {"matchExpressions": [
                             {"key": "kubernetes.io/hostname", "operator": "In", "values": [prefer]}]}}]}},
                     "containers": [{"name": "worker", "image": "registry.local/rebound-sim/trainer:latest",
                                     "command": ["python", "train.py"]}],
                 }}},
    }))
    .expect("Job");
    Api::<Job>::namespaced(bed.client(), ns)
        .create(&PostParams::default(), &job)
        .await
        .expect("create the Job")
}

/// Every pod of the Job (by its uid), terminating ones included.
async fn pods_of(bed: &Testbed, ns: &str, job_uid: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(bed.client(), ns)
        .list(&ListParams::default().labels(&format!("{CONTROLLER_UID}={job_uid}")))
        .await
        .expect("the Job's pods")
        .items
}

/// The Job's running pod, if it has one and no other pod is left.
async fn running_pod(bed: &Testbed, ns: &str, job_uid: &str) -> Option<Pod> {
    let pods = pods_of(bed, ns, job_uid).await;
    if pods.len() != 1 {
        return None;
    }
    pods.into_iter()
        .find(|p| rebound_sim::cluster::pod_running(p) && p.metadata.deletion_timestamp.is_none())
}

/// Events of reason `reason` about object `name` in `ns`, anywhere when
/// `ns` is `None` (rebound's node Events).
async fn said(
    bed: &Testbed,
    ns: Option<&str>,
    reason: &str,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: Api<k8s_openapi::api::events::v1::Event> = match ns {
        Some(ns) => Api::namespaced(bed.client(), ns),
        None => Api::all(bed.client()),
    };
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

fn notes(events: &[k8s_openapi::api::events::v1::Event]) -> Vec<String> {
    events.iter().filter_map(|e| e.note.clone()).collect()
}

/// rebound's successful patches of node `node` (cordon, taint, uncordon),
/// in the order they arrived.
fn node_patches(bed: &Testbed, node: &str) -> Vec<RequestRecord> {
    bed.requests()
        .into_iter()
        .filter(by_controller)
        .filter(|r| {
            r.verb == "patch"
                && r.resource == "nodes"
                && r.subresource.is_empty()
                && r.name.as_deref() == Some(node)
                && r.status < 300
        })
        .collect()
}

/// rebound's restarts of the Job: its `deletecollection`s of the Job's
/// pods by the Job's uid.
fn restarts_of(bed: &Testbed, ns: &str, job_uid: &str) -> Vec<RequestRecord> {
    requests(
        bed,
        "deletecollection",
        "pods",
        &format!("controller-uid={job_uid}"),
    )
    .into_iter()
    .filter(|r| r.namespace.as_deref() == Some(ns))
    .collect()
}

/// A pod's creation or binding in the audit log.
#[derive(Debug, Clone)]
struct Seen {
    /// `create` or `binding`.
    what: &'static str,
    pod: String,
    /// The creator or binder (the user agent up to its first `/`).
    by: String,
    /// The node of a binding.
    node: Option<String>,
    /// When the server completed it (RFC 3339, microseconds).
    at: String,
}

/// The creations and bindings of pods in `ns` the server accepted, in
/// the order it completed them.
fn audit(cp: &ControlPlane, ns: &str) -> Vec<Seen> {
    let path = cp.audit_log_path().expect("the control plane's audit log");
    let mut out: Vec<Seen> = audit_events(path)
        .into_iter()
        .filter(|e| e["objectRef"]["resource"] == "pods" && e["objectRef"]["namespace"] == ns)
        .filter(|e| e["verb"] == "create")
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .map(|e| {
            let binding = e["objectRef"]["subresource"] == "binding";
            let ua = e["userAgent"].as_str().unwrap_or("");
            Seen {
                what: if binding { "binding" } else { "create" },
                pod: if binding {
                    e["objectRef"]["name"].as_str().unwrap_or("").to_string()
                } else {
                    e["responseObject"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                },
                by: ua.split('/').next().unwrap_or(ua).to_string(),
                node: binding
                    .then(|| {
                        e["requestObject"]["target"]["name"]
                            .as_str()
                            .map(String::from)
                    })
                    .flatten(),
                at: e["stageTimestamp"].as_str().unwrap_or("").to_string(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.at.cmp(&b.at));
    out
}

/// What the test looks at, for a failure's message: the nodes (cordon,
/// taints), the Job and its pods, rebound's Events on them and its node
/// and restart requests, and the audit log's creations and bindings.
async fn describe(bed: &Testbed, cp: &ControlPlane, ns: &str) -> String {
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
            out += &format!(
                "\n  node {n} cordoned={} taints={taints:?} annotations={:?}",
                cordoned(&nd),
                nd.annotations()
                    .iter()
                    .filter(|(k, _)| k.starts_with("rebound.dev/"))
                    .collect::<Vec<_>>()
            );
            for reason in ["BreakerOpen", "NodeTainted", "NodeCordoned"] {
                for note in notes(&said(bed, None, reason, &n).await) {
                    out += &format!("\n    {reason}: {note}");
                }
            }
        }
    }
    if let Ok(jobs) = Api::<Job>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
    {
        for j in jobs.items {
            let st = j.status.clone().unwrap_or_default();
            out += &format!(
                "\n  job {} uid={} active={:?} failed={:?} succeeded={:?} annotations={:?}",
                j.name_any(),
                j.uid().unwrap_or_default(),
                st.active,
                st.failed,
                st.succeeded,
                j.annotations()
                    .iter()
                    .filter(|(k, _)| k.starts_with("rebound.dev/"))
                    .collect::<Vec<_>>()
            );
        }
    }
    if let Ok(pods) = Api::<Pod>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
    {
        for p in pods.items {
            out += &format!(
                "\n  pod {} uid={} node={:?} phase={:?} deleting={}",
                p.name_any(),
                p.uid().unwrap_or_default(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                p.metadata.deletion_timestamp.is_some(),
            );
        }
    }
    for reason in [
        "RestartSkipped",
        "JobRestarted",
        "JobResumed",
        "JobNotResumed",
        "FailedScheduling",
    ] {
        for e in events_with_reason(bed, ns, reason).await {
            out += &format!(
                "\n  event {reason} on {:?}: {}",
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.note.unwrap_or_default()
            );
        }
    }
    for r in bed
        .requests()
        .into_iter()
        .filter(by_controller)
        .filter(|r| (r.verb == "patch" && r.resource == "nodes") || r.verb == "deletecollection")
    {
        out += &format!(
            "\n  rebound: {} {} {} -> {} at {}",
            r.verb,
            r.path,
            urldecode(&r.query),
            r.status,
            rfc3339(r.wall)
        );
    }
    for s in audit(cp, ns) {
        out += &format!("\n  audit: {s:?}");
    }
    out
}

/// [`wait`], polling every 100 ms, with [`describe`] in a timeout's
/// message.
async fn until<T, F, Fut>(
    bed: &Testbed,
    cp: &ControlPlane,
    ns: &str,
    what: &str,
    timeout: Duration,
    mut check: F,
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
            panic!(
                "timed out after {timeout:?} waiting for: {what}; what the test sees:{}",
                describe(bed, cp, ns).await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A request's arrival, as the annotations and the audit log write time.
fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Milliseconds since `t`, for the step timings printed.
fn ms(t: Instant) -> u128 {
    t.elapsed().as_millis()
}

fn separated(nd: &Node) -> bool {
    cordoned(nd)
        && nd
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == "rebound.dev/separated"))
}

async fn a_held_cordon_holds_the_restart_and_the_new_pod_lands_off_the_faulty_node(
    cp: &'static ControlPlane,
) {
    let t = Instant::now();
    let bed = plane_bed(cp, 3).await;
    let names = bed.cluster.node_names();
    let (a, b, c) = (names[0].clone(), names[1].clone(), names[2].clone());
    let (bed, ctl) = ready_bed(bed, &one_separation_policy()).await;
    let ns = bed.ns("ml");
    let served = until(&bed, cp, &ns, "the root policy Ready=True", T, || async {
        let p = Api::<rebound::api::RecoveryPolicy>::namespaced(bed.client(), &bed.root())
            .get_opt("default")
            .await
            .ok()??;
        let ready = p
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .clone();
        assert_ne!(
            ready.status, "False",
            "the root policy is refused: {ready:?}"
        );
        (ready.status == "True").then(|| serde_json::to_value(&p.spec).unwrap_or(Value::Null))
    })
    .await;
    let na = &served["nodeActions"];
    assert_eq!(
        (na["maxSeparated"].as_str(), na["breakerWindow"].as_str()),
        (Some("1"), Some("40s")),
        "the root policy's nodeActions as served: {na}"
    );
    eprintln!(
        "held cordon: bed of {a}, {b}, {c} and the controller in {} ms; nodeActions {na}",
        ms(t)
    );

    // The Job's pod: made by the Job controller, bound to B by
    // kube-scheduler (B preferred), run by the simulated kubelet.
    let t = Instant::now();
    let job = job_preferring(&bed, &ns, JOB, &b).await;
    let job_uid = job.uid().expect("the Job's uid");
    let first = until(&bed, cp, &ns, "the Job's pod running", LONG, || {
        running_pod(&bed, &ns, &job_uid)
    })
    .await;
    let first_uid = first.uid().expect("uid");
    assert_eq!(
        node_name(&first),
        b,
        "kube-scheduler puts the pod on the node it prefers"
    );
    let seen = audit(cp, &ns);
    assert!(
        seen.iter().any(|s| s.what == "binding"
            && s.pod == first.name_any()
            && s.by == "kube-scheduler"
            && s.node.as_deref() == Some(b.as_str())),
        "the pod bound to {b} by kube-scheduler: {seen:?}"
    );
    eprintln!(
        "held cordon: pod {} bound to {b} by kube-scheduler and running in {} ms",
        first.name_any(),
        ms(t)
    );

    // XID 79 (Separate) on A: the breaker's one separation.
    let t = Instant::now();
    xid_condition(&bed, &a, "79").await;
    until(&bed, cp, &ns, "A cordoned and tainted", T, || async {
        separated(&node(&bed, &a).await).then_some(())
    })
    .await;
    eprintln!("held cordon: {a} cordoned and tainted in {} ms", ms(t));

    // XID 79 on B, under the Job's pod: the breaker holds B's cordon, and
    // with it the Job's restart.
    let t_b = Instant::now();
    xid_condition(&bed, &b, "79").await;
    let open = until(&bed, cp, &ns, "a BreakerOpen Event on B", T, || async {
        let e = said(&bed, None, "BreakerOpen", &b).await;
        (!e.is_empty()).then(|| notes(&e))
    })
    .await;
    eprintln!(
        "held cordon: BreakerOpen on {b} in {} ms: {open:?}",
        ms(t_b)
    );
    let skipped = until(
        &bed,
        cp,
        &ns,
        "the Job's RestartSkipped CordonHeld Event",
        T,
        || async {
            let n: Vec<String> = notes(&said(&bed, Some(&ns), "RestartSkipped", JOB).await)
                .into_iter()
                .filter(|n| n.starts_with("CordonHeld"))
                .collect();
            (!n.is_empty()).then_some(n)
        },
    )
    .await;
    assert!(
        skipped.iter().any(|n| n.contains(b.as_str())),
        "the Event names the held node {b}: {skipped:?}"
    );
    assert!(
        decisions(&ctl, "CordonHeld") >= 1.0,
        "the held restart is counted: {}",
        ctl.metrics.encode()
    );
    eprintln!(
        "held cordon: the Job's restart held {} ms after the fault: {skipped:?}",
        ms(t_b)
    );

    // After that positive control, while the cordon is held: B is not
    // cordoned, and the Job keeps its pod on B, nothing deleted. Checked
    // for as long as the hold lasts (it ends when the window allows B's
    // cordon: about 40 s after A's). A restart (or a change of the pod)
    // is allowed only once B's cordon has been answered: seen here before
    // the watch shows B cordoned, it is judged after [`SAME_STEP`].
    let mut checks = 0u32;
    loop {
        if cordoned(&node(&bed, &b).await) {
            break;
        }
        let restarts = restarts_of(&bed, &ns, &job_uid);
        let pods = pods_of(&bed, &ns, &job_uid).await;
        let same = pods.len() == 1
            && pods[0].uid().as_deref() == Some(first_uid.as_str())
            && pods[0].metadata.deletion_timestamp.is_none();
        if !restarts.is_empty() || !same {
            tokio::time::sleep(SAME_STEP).await;
            let restart = restarts_of(&bed, &ns, &job_uid).first().map(|r| r.at);
            let cordon = node_patches(&bed, &b).first().map(|p| p.at + p.elapsed);
            match (restart, cordon) {
                (Some(r), Some(c)) if r >= c => break,
                _ => panic!(
                    "the Job was restarted or its pod changed while B's cordon is held; what the test sees:{}",
                    describe(&bed, cp, &ns).await
                ),
            }
        }
        checks += 1;
        if t_b.elapsed() > WINDOW + LONG {
            // The window runs from A's separation: its cordon request, and
            // the `separated-at` rebound wrote on A.
            let sent = node_patches(&bed, &a).first().map(|r| rfc3339(r.wall));
            panic!(
                "B not cordoned {:?} after its fault, {:?} after A's cordon request (at {sent:?}; the window is {WINDOW:?}); what the test sees:{}",
                t_b.elapsed(),
                node_patches(&bed, &a).first().map(|r| r.at.elapsed()),
                describe(&bed, cp, &ns).await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let held_for = t_b.elapsed();
    eprintln!(
        "held cordon: B held for {} ms ({checks} checks: no restart, the pod stayed)",
        held_for.as_millis()
    );

    // The window passed: B cordoned and tainted, the hold recorded on it.
    let t = Instant::now();
    let nd = until(&bed, cp, &ns, "B cordoned and tainted", T, || async {
        let nd = node(&bed, &b).await;
        separated(&nd).then_some(nd)
    })
    .await;
    assert_eq!(
        nd.annotations()
            .get(rebound::recover::CORDON_HELD_ANNOTATION)
            .map(String::as_str),
        Some("true"),
        "the held cordon recorded on B: {:?}",
        nd.annotations()
    );
    let (pa, pb) = (node_patches(&bed, &a), node_patches(&bed, &b));
    assert_eq!(
        (pa.len(), pb.len()),
        (1, 1),
        "one cordon patch on A and one on B: {:?} {:?}",
        pa.iter().map(|r| rfc3339(r.wall)).collect::<Vec<_>>(),
        pb.iter().map(|r| rfc3339(r.wall)).collect::<Vec<_>>()
    );
    let between = pb[0].at.duration_since(pa[0].at);
    assert!(
        between + Duration::from_secs(1) >= WINDOW,
        "B's cordon waited the breaker's window after A's: {between:?}"
    );
    eprintln!(
        "held cordon: B cordoned {} ms after A ({} ms after its fault)",
        between.as_millis(),
        pb[0].at.duration_since(t_b).as_millis()
    );

    // Only now the restart: one deletecollection by the Job's uid, in the
    // step that lets B's cordon through or later.
    let restart = until(&bed, cp, &ns, "the Job restarted", T, || async {
        let r = restarts_of(&bed, &ns, &job_uid);
        let e = said(&bed, Some(&ns), "JobRestarted", JOB).await;
        (!r.is_empty() && !e.is_empty()).then(|| (r[0].clone(), notes(&e)))
    })
    .await;
    let (restart, restarted) = restart;
    let cordon_done = pb[0].at + pb[0].elapsed;
    assert!(
        restart.at >= cordon_done,
        "the restart's request came before B's cordon was answered: {}, the cordon {} (answered {:?} later)",
        rfc3339(restart.wall),
        rfc3339(pb[0].wall),
        pb[0].elapsed
    );
    eprintln!(
        "held cordon: restart {} ms after B's cordon request arrived ({} its answer), {} ms after B was seen cordoned: {restarted:?}",
        restart.at.duration_since(pb[0].at).as_millis(),
        if restart.at >= cordon_done {
            format!(
                "{} ms after",
                restart.at.duration_since(cordon_done).as_millis()
            )
        } else {
            format!(
                "{} ms BEFORE",
                cordon_done.duration_since(restart.at).as_millis()
            )
        },
        ms(t)
    );

    // The replacement: made by the Job controller after its failure
    // backoff, bound by kube-scheduler to C, running.
    let t = Instant::now();
    let second = until(
        &bed,
        cp,
        &ns,
        "the Job's replacement pod running",
        LONG,
        || async {
            let p = running_pod(&bed, &ns, &job_uid).await?;
            (p.uid().as_deref() != Some(first_uid.as_str())).then_some(p)
        },
    )
    .await;
    assert_eq!(
        node_name(&second),
        c,
        "the replacement goes to the one node left in service"
    );
    eprintln!(
        "held cordon: replacement {} running on {c} {} ms after the restart was seen",
        second.name_any(),
        ms(t)
    );

    // JobResumed: rebound followed the restart until the Job runs again.
    let t = Instant::now();
    let resumed = until(&bed, cp, &ns, "the Job's JobResumed", LONG, || async {
        let (resumed, not) = ends(&bed, &ns, JOB).await;
        assert!(not.is_empty(), "{JOB} not resumed: {not:?}");
        (!resumed.is_empty()).then_some(resumed)
    })
    .await;
    eprintln!(
        "held cordon: JobResumed {} ms after the replacement ran: {resumed:?}",
        ms(t)
    );

    // The audit log: every pod of the Job made by the Job controller and
    // bound by kube-scheduler; none bound to A, and after B's fault none
    // to B.
    let seen = audit(cp, &ns);
    let creates: Vec<&Seen> = seen.iter().filter(|s| s.what == "create").collect();
    let bindings: Vec<&Seen> = seen.iter().filter(|s| s.what == "binding").collect();
    assert_eq!(creates.len(), 2, "two pods made: {seen:#?}");
    assert!(
        creates.iter().all(|s| s.by == "kube-controller-manager"),
        "by the Job controller: {seen:#?}"
    );
    assert_eq!(
        bindings
            .iter()
            .map(|s| (s.pod.as_str(), s.by.as_str(), s.node.as_deref()))
            .collect::<Vec<_>>(),
        vec![
            (
                first.name_any().as_str(),
                "kube-scheduler",
                Some(b.as_str())
            ),
            (
                second.name_any().as_str(),
                "kube-scheduler",
                Some(c.as_str())
            ),
        ],
        "the first pod bound to B, the replacement to C, both by kube-scheduler: {seen:#?}"
    );
    // Every pod the Job has now, as the server has it.
    let now: Vec<(String, String)> = pods_of(&bed, &ns, &job_uid)
        .await
        .iter()
        .map(|p| (p.name_any(), node_name(p)))
        .collect();
    assert!(
        now.iter().all(|(_, n)| *n != a && *n != b),
        "no pod of the Job on a faulty node: {now:?}"
    );
    assert_eq!(
        restarts_of(&bed, &ns, &job_uid).len(),
        1,
        "one restart: {}",
        describe(&bed, cp, &ns).await
    );
    assert_eq!(
        said(&bed, Some(&ns), "JobRestarted", JOB).await.len(),
        1,
        "one JobRestarted Event"
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

mod a_held_cordon_holds_the_restart_and_the_new_pod_lands_off_the_faulty_node {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn real() {
        let _watchdog = crate::watchdog::start();
        if let Some(cp) = super::plane_or_skip(module_path!()).await {
            let t = std::time::Instant::now();
            rebound_sim::testbed::check_restart_endings(
                super::a_held_cordon_holds_the_restart_and_the_new_pod_lands_off_the_faulty_node(
                    cp,
                ),
            )
            .await;
            eprintln!("{}::real took {:?}", module_path!(), t.elapsed());
        }
    }
}
