//! In-place restarts on the real kubelet that do not go smoothly: an agent
//! that never comes back (the recovery falls back to the next tier and the
//! barrier is released), a repeat within ten minutes (the kubelet's
//! restart backoff), and agents cut off from the API server while their
//! job moves on (they catch up). See real_node.rs for the node and the
//! wiring.

use super::real_node::{
    Fault, RT, agent_rbac, create_job, create_job_adjusted, restarts_in_place_on, running_on,
    wait_long,
};
use super::tiers::{Kind, TIERS, agent_restarts, destructive, job_annotations, ready, uid};
use super::*;
use rebound::inplace::{GENERATION_ANNOTATION, RELEASED_ANNOTATION};
use rebound_sim::envtest::node::{REBOUND_IMAGE, RealNode};

/// In place, then Recreate after 8 s; the fault stays present, so a long
/// cooldown keeps it from being decided again once the recovery ends.
const FALLBACK: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: tiers, namespace: ml}
spec:
  selector:
    matchLabels: {kcover.io/cascading-recovery: "true"}
  cooldown: 5m
  restart:
    tiers: [InPlace, Recreate]
    fallbackAfter: 8s
"#;

/// A tag of the rebound image that a test removes while its pods run, so
/// that an agent from it cannot start again (nothing can be pulled here).
const GONE: &str = "docker.io/library/rebound-e2e:gone";

/// Recoveries the controller saw end with the job running again.
fn resumed(ctl: &rebound::controller::ControllerHandle) -> f64 {
    ctl.metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("rebound_time_to_resume_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Leave the shared node as found: no fault for the next test's controller.
pub(super) async fn clear_fault(bed: &Testbed, node: &RealNode) {
    bed.cluster
        .set_node_condition(
            node.name(),
            rebound::fault::wire::GPU_CONDITION,
            "False",
            "NoFault",
            "",
        )
        .await
        .expect("clear the fault");
}

async fn an_agent_that_never_comes_back_falls_back_with_the_barrier_released(
    node: &'static RealNode,
) {
    let kind = Kind::Volcano;
    node.ctr(&[
        "-n",
        "k8s.io",
        "images",
        "tag",
        "--force",
        &format!("docker.io/library/{REBOUND_IMAGE}"),
        GONE,
    ])
    .expect("tag the image");
    let (bed, ctl) = bed_with(Server::Real, 1, FALLBACK, None).await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    create_job(&bed, &ml, kind, 2, node.name(), |i| {
        if i == 1 {
            GONE.into()
        } else {
            REBOUND_IMAGE.into()
        }
    })
    .await;
    let pods = running_on(&bed, &ml, kind, 2, node).await;
    node.ctr(&["-n", "k8s.io", "images", "rm", GONE])
        .expect("remove the tag");
    xid_condition(&bed, node.name(), "45").await;
    wait("generation 1 raised", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    let raised = Instant::now();
    // The agent of the pod whose image is gone cannot start again.
    let stuck = wait_long("an agent unable to start again", RT, node, || async {
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(bed.client(), &ml)
            .list(&kube::api::ListParams::default().labels(kind.selector()))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .find(|p| {
                p.status
                    .iter()
                    .flat_map(|s| s.init_container_statuses.iter().flatten())
                    .any(|c| {
                        c.state
                            .as_ref()
                            .and_then(|s| s.waiting.as_ref())
                            .and_then(|w| w.reason.as_deref())
                            .is_some_and(|r| r.contains("Image"))
                    })
            })
    })
    .await;
    assert!(pods.iter().any(|p| uid(p) == uid(&stuck)));
    // After fallbackAfter: Recreate (a Volcano Command), and the generation
    // released in the same write, so the recreated pods start at once.
    wait_long("the fallback to Recreate, released", RT, node, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        let d = destructive(&bed);
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1") && !d.is_empty()).then_some(())
    })
    .await;
    assert!(
        raised.elapsed() >= Duration::from_secs(7),
        "fell back after {:?}, before fallbackAfter (8 s)",
        raised.elapsed()
    );
    let d = destructive(&bed);
    assert!(
        d.iter()
            .all(|r| r.starts_with("create ") && r.contains("/commands")),
        "Recreate of a Volcano Job is one Command: {d:?}"
    );
    // The image is back: the recreated job runs again and its restart
    // ends in JobResumed (without it, in JobNotResumed only 10 minutes
    // after the fallback). The kubelet may be backing off the pull.
    node.ctr(&[
        "-n",
        "k8s.io",
        "images",
        "tag",
        "--force",
        &format!("docker.io/library/{REBOUND_IMAGE}"),
        GONE,
    ])
    .expect("tag the image again");
    clear_fault(&bed, node).await;
    every_restart_ends_within(&bed, RT).await;
    node.ctr(&["-n", "k8s.io", "images", "rm", GONE])
        .expect("remove the tag");
    ctl.shutdown().await;
}

async fn a_repeat_within_ten_minutes_restarts_in_place_again(node: &'static RealNode) {
    let kind = Kind::Batch;
    let (bed, ctl) = bed_with(Server::Real, 1, TIERS, None).await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    create_job(&bed, &ml, kind, 1, node.name(), |_| REBOUND_IMAGE.into()).await;
    let before = running_on(&bed, &ml, kind, 1, node).await;
    let mut took = Vec::new();
    for (round, code) in [(1, "63"), (2, "64")] {
        let t = Instant::now();
        xid_condition(&bed, node.name(), code).await;
        let after = wait_long(&format!("in-place restart {round}"), RT, node, || async {
            let a = job_annotations(&bed, &ml, kind).await;
            let p = running(&bed, &ml, kind.selector()).await;
            let r = round.to_string();
            (a.get(RELEASED_ANNOTATION) == Some(&r)
                && p.len() == 1
                && p.iter().all(|p| ready(p) && agent_restarts(p) == round))
            .then_some(p)
        })
        .await;
        took.push(t.elapsed());
        assert_eq!(uid(&after[0]), uid(&before[0]), "the same pod");
        // The next fault only once the controller has seen this recovery
        // end: one during it would be covered by it (real_node.rs).
        wait("the controller saw the job running again", T, || async {
            (resumed(&ctl) >= round as f64).then_some(())
        })
        .await;
    }
    // Measured, not asserted beyond RT: how the kubelet paces repeats
    // is what docs/simulated-kubelet.md records.
    eprintln!("in place on the real kubelet, twice within a minute: {took:?}");
    assert_eq!(destructive(&bed), Vec::<String>::new());
    clear_fault(&bed, node).await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// Where the agents of [`agents_cut_off_from_the_api_server_catch_up_and_restart_in_place`]
/// find their kubeconfig.
const AGENT_KUBECONFIG: &str = "/etc/rebound-e2e/kubeconfig";

/// The agents reach the API server through a proxy of their own (the
/// test bed's recording, fault-injecting proxy, a second one beside the
/// controller's): a kubeconfig in a ConfigMap, named by `KUBECONFIG`
/// (which the agent's client reads before the in-cluster settings), with
/// the pod's own ServiceAccount token, which the proxy forwards (the
/// agents keep their RBAC), and its CA (unused over the proxy's plain
/// HTTP, but without one the agent's client looks for the system's roots,
/// which its image does not have). Then every connection of the agents is closed
/// and refused for 10 s from just before the fault: rebound raises the
/// generation meanwhile, no pod restarts while its agent cannot see it,
/// and once the proxy is back the agents read their job again (their
/// first request), exit, and the kubelet restarts the pods in place.
async fn agents_cut_off_from_the_api_server_catch_up_and_restart_in_place(node: &'static RealNode) {
    let kind = Kind::Volcano;
    let upstream = Testbed::real_upstream().await.expect("the control plane");
    let proxy = rebound_sim::proxy::Proxy::start(upstream)
        .await
        .expect("the agents' proxy");
    let (bed, ctl) = bed_with(Server::Real, 1, TIERS, None).await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: agents\n\
         clusters: [{{name: proxy, cluster: {{server: \"{}\", \
         certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt}}}}]\n\
         users: [{{name: agent, user: {{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}}}}]\n\
         contexts: [{{name: agents, context: {{cluster: proxy, user: agent}}}}]\n",
        proxy.url()
    );
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent-kubeconfig"},
        "data": {"kubeconfig": kubeconfig},
    }))
    .expect("configmap");
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(bed.client(), &ml)
        .create(&Default::default(), &cm)
        .await
        .expect("create the agents' kubeconfig");
    let dir = AGENT_KUBECONFIG
        .rsplit_once('/')
        .map_or("/", |(d, _)| d)
        .to_owned();
    create_job_adjusted(
        &bed,
        &ml,
        kind,
        2,
        node.name(),
        |_| REBOUND_IMAGE.into(),
        |spec| {
            spec["volumes"] = serde_json::json!([{"name": "agent-kubeconfig",
                "configMap": {"name": "agent-kubeconfig"}}]);
            let agent = spec["initContainers"]
                .as_array_mut()
                .and_then(|a| {
                    a.iter_mut()
                        .find(|c| c["name"] == rebound::inplace::AGENT_CONTAINER)
                })
                .expect("the agent");
            agent["volumeMounts"] = serde_json::json!([{"name": "agent-kubeconfig",
                "mountPath": dir, "readOnly": true}]);
            if let Some(env) = agent["env"].as_array_mut() {
                env.push(serde_json::json!({"name": "KUBECONFIG", "value": AGENT_KUBECONFIG}));
            }
        },
    )
    .await;
    running_on(&bed, &ml, kind, 2, node).await;
    // The agents follow their job through their proxy, with their own
    // identity (a watch that the proxy logged as answered).
    wait("the agents' watches through their proxy", T, || async {
        let watches = proxy
            .requests()
            .iter()
            .filter(|r| r.verb == "watch" && r.resource == "jobs" && r.status == 200)
            .count();
        (watches >= 2).then_some(())
    })
    .await;
    let fault = Fault {
        xid: "45",
        second: None,
        cut: Some((&proxy, Duration::from_secs(10))),
    };
    restarts_in_place_on(node, &bed, &ml, kind, 2, fault).await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
    proxy.shutdown().await;
}

real_node!(an_agent_that_never_comes_back_falls_back_with_the_barrier_released);
real_node!(agents_cut_off_from_the_api_server_catch_up_and_restart_in_place);
real_node!(a_repeat_within_ten_minutes_restarts_in_place_again);
