//! Bounds on what a tenant writes (issue 22): a count a tenant sets costs
//! a bounded amount however large it is, and acts on nothing outside the
//! tenant's namespace.

use super::*;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::PostParams;
use rebound_sim::cluster::SimConfig;

/// This process's resident memory in MiB (the controller runs in it).
fn rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// A kcover Event in `ns` about pod `pod`, on `node`, with `count`: what
/// any tenant can write in its own namespace.
async fn kcover_event(bed: &Testbed, ns: &str, pod: &str, node: &str, count: i32) {
    let ev = rebound_sim::cluster::kcover_event(ns, pod, node, count, "the tenant says so");
    Api::<CoreEvent>::namespaced(bed.client(), ns)
        .create(&PostParams::default(), &ev)
        .await
        .expect("a tenant may write this Event");
}

async fn a_tenant_event_with_a_huge_count_changes_nothing_outside_its_namespace(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let (team_a, team_b) = (bed.ns("team-a"), bed.ns("team-b"));
    let sel_a = running_pytorchjob(&bed, &team_a, "pt", 1).await;
    running_pytorchjob(&bed, &team_b, "other", 1).await;
    let node = running(&bed, &team_a, &sel_a)
        .await
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("pt-worker-0"))
        .map(node_name)
        .expect("pt-worker-0 runs");
    let rss_before = rss_mib();

    kcover_event(&bed, &team_a, "pt-worker-0", &node, i32::MAX).await;
    // The tenant's own job is restarted (that much a tenant may ask)...
    wait("team-a's job restarted", T, || async {
        (job_restarts(&bed, &team_a, "pt").await >= 1).then_some(())
    })
    .await;
    // ...and the controller is still there: a positive control in another
    // namespace is recovered, which is also what the negative assertions
    // below wait for instead of a bare sleep.
    bed.cluster
        .fail_container(&team_b, "other-worker-0", "pytorch", 1, "Error")
        .await
        .expect("fail");
    wait("team-b's job recovered after the flood", T, || async {
        (job_restarts(&bed, &team_b, "other").await == 1).then_some(())
    })
    .await;

    assert_eq!(
        job_restarts(&bed, &team_a, "pt").await,
        1,
        "one restart of the tenant's job, not one per count"
    );
    assert_eq!(job_restarts(&bed, &team_b, "other").await, 1);
    assert!(!cordoned(&super::node(&bed, &node).await), "no cordon");
    assert!(
        requests(&bed, "patch", "nodes", "").is_empty(),
        "the controller wrote no node"
    );
    if let (Some(before), Some(after)) = (rss_before, rss_mib()) {
        // One occurrence cloned per count was 2^31 faults (hundreds of
        // GiB); the bounded window is a few KiB. The margin is for the
        // other tests sharing this process.
        assert!(
            after - before < 512.0,
            "resident memory grew {:.0} MiB",
            after - before
        );
    }
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

e2e!(a_tenant_event_with_a_huge_count_changes_nothing_outside_its_namespace);

/// The Volcano Jobs of `ns`.
async fn volcano_job(bed: &Testbed, ns: &str, name: &str) -> DynamicObject {
    Api::<DynamicObject>::namespaced_with(
        bed.client(),
        ns,
        &rebound_sim::actors::volcano::job_resource(),
    )
    .get(name)
    .await
    .expect("the Volcano job")
}

/// The Volcano Commands of `ns`.
async fn commands(bed: &Testbed, ns: &str) -> Vec<DynamicObject> {
    Api::<DynamicObject>::namespaced_with(
        bed.client(),
        ns,
        &rebound_sim::actors::volcano::command_resource(),
    )
    .list(&ListParams::default())
    .await
    .map(|l| l.items)
    .unwrap_or_default()
}

async fn a_volcano_restart_whose_answer_is_lost_is_one_command(server: Server) {
    // Volcano's controller runs as a task of the test, so that it can be
    // down while the restart is retried: a lost answer restarts twice only
    // when the retry comes before Volcano takes the first Command, as
    // behind a busy or restarting Volcano controller.
    let cfg = SimConfig {
        nodes: 4,
        operators: rebound_sim::cluster::Operators {
            volcano: false,
            ..Default::default()
        },
        ..Default::default()
    };
    let (bed, ctl) = bed_with(server, 4, "", Some(cfg)).await;
    let ml = bed.ns("ml");
    // On a bed with the real operators, the real vc-controller-manager is
    // stopped (SIGSTOP) instead, and goes on where it was.
    let real = bed
        .runs_real_operators()
        .then(|| rebound_sim::envtest::operators::shared().expect("real operators"));
    let volcano = tokio::spawn(rebound_sim::actors::volcano::run(bed.client()));
    if real.is_some() {
        volcano.abort();
    }
    bed.cluster
        .create_volcano_job(&ml, "vc", 2, &[OPT_IN])
        .await
        .expect("create the Volcano job");
    let sel = "volcano.sh/job-name=vc";
    wait("vc running", T, || async {
        (running(&bed, &ml, sel).await.len() >= 2).then_some(())
    })
    .await;
    volcano.abort();
    let _ = volcano.await;
    let paused = real.map(|ops| ops.pause("vc-controller-manager").expect("pause Volcano"));

    bed.inject()
        .lose_next_answers(1, 504, Some("create"), Some("commands"));
    let pod = running(&bed, &ml, sel).await[0].clone();
    let pname = pod.metadata.name.clone().expect("name");
    let cname = pod
        .spec
        .as_ref()
        .map(|s| s.containers[0].name.clone())
        .expect("a container");
    bed.cluster
        .fail_container(&ml, &pname, &cname, 1, "Error")
        .await
        .expect("fail");
    let tries = || {
        bed.requests()
            .into_iter()
            .filter(|r| by_controller(r) && r.verb == "create" && r.resource == "commands")
            .map(|r| r.status)
            .collect::<Vec<_>>()
    };
    // The first create is carried out and answered 504; the retry (after
    // the core's back-off) meets that Command.
    let statuses = wait("the controller retried the Command", T, || async {
        let s = tries();
        (s.len() >= 2).then_some(s)
    })
    .await;
    assert_eq!(statuses[0], 504, "{statuses:?}");
    assert_eq!(
        statuses[1], 409,
        "the retry met its own Command: {statuses:?}"
    );
    let cmds = commands(&bed, &ml).await;
    assert_eq!(cmds.len(), 1, "one Command for one restart");

    let volcano = match paused {
        Some(p) => {
            p.resume();
            None
        }
        None => Some(tokio::spawn(rebound_sim::actors::volcano::run(
            bed.client(),
        ))),
    };
    // Volcano comes back and runs what it finds: one restart (the Command
    // consumed, one retry, version 1). Its pods running again is Volcano's
    // and the kubelets' part, not this test's: in the full suite a Failed
    // pod that Volcano deleted stayed Terminating for over a minute on a
    // loaded machine (seen on both servers; noted on the issue).
    let start = std::time::Instant::now();
    loop {
        let job = volcano_job(&bed, &ml, "vc").await;
        let version = job.data["status"]["version"].as_i64();
        let left = commands(&bed, &ml).await.len();
        if version >= Some(1) && left == 0 {
            break;
        }
        assert!(
            start.elapsed() < 3 * T,
            "vc not restarted by Volcano after {:?}: status.version {version:?}, {left} Command(s) left, status {}",
            3 * T,
            job.data["status"],
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let job = volcano_job(&bed, &ml, "vc").await;
    assert_eq!(
        job.data["status"]["retryCount"], 1,
        "{}",
        job.data["status"]
    );
    assert_eq!(tries().len(), 2, "no further Command");
    // Its ending needs Volcano running (its pods come back through it), and
    // on a loaded machine a deleted pod has stayed Terminating for over a
    // minute (above).
    every_restart_ends_within(&bed, Duration::from_secs(120)).await;
    if let Some(v) = volcano {
        v.abort();
    }
    ctl.shutdown().await;
}

e2e!(a_volcano_restart_whose_answer_is_lost_is_one_command);
