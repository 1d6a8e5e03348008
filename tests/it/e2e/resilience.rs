//! Nothing lost, nothing done twice: API faults, a killed controller, and
//! fail-over between two replicas.

use super::*;

async fn dropped_watches_410s_and_500s_lose_no_fault_and_restart_nothing_twice(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    c.create_pytorchjob(&ml, "pt", 2, &[OPT_IN]).await.unwrap();
    c.create_pytorchjob(&ml, "pu", 2, &[OPT_IN]).await.unwrap();
    let up = |j: &'static str| {
        let (bed, ml) = (&bed, &ml);
        async move { (running(bed, ml, &format!("{PT}={j}")).await.len() >= 3).then_some(()) }
    };
    wait("pt running", T, || up("pt")).await;
    wait("pu running", T, || up("pu")).await;
    // Break every watch, make old versions expire, and fail the next requests.
    let inj = bed.inject();
    inj.expire_all_versions();
    inj.drop_watches();
    inj.fail_next(5, 500);
    // The fault is written during the outage (retried until the API answers).
    wait("the fault written", T, || async {
        c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
            .await
            .ok()
    })
    .await;
    wait(
        "pt restarted after the outage",
        Duration::from_secs(20),
        || async { (restarts_in(&bed, &ml, PT, "pt") >= 1).then_some(()) },
    )
    .await;
    inj.drop_watches();
    c.fail_container(&ml, "pu-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait(
        "pu restarted after another drop",
        Duration::from_secs(20),
        || async { (restarts_in(&bed, &ml, PT, "pu") >= 1).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        restarts_in(&bed, &ml, PT, "pt"),
        1,
        "re-lists replay the failed pod: still one restart"
    );
    assert_eq!(restarts_in(&bed, &ml, PT, "pu"), 1);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// An API server outage (a restart: every connection cut, and behind the
/// proxy new ones refused for a while) while a fault happens: the fault
/// is acted on once the server is back, once.
async fn an_api_server_outage_loses_no_fault_and_restarts_nothing_twice(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    let sel = running_pytorchjob(&bed, &ml, "pt", 1).await;
    let before = running(&bed, &ml, &sel).await.len();
    bed.interrupt_api_server(Duration::from_secs(2))
        .await
        .expect("outage");
    // Written as soon as the server takes connections again.
    wait("the fault written", Duration::from_secs(20), || async {
        c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
            .await
            .ok()
    })
    .await;
    wait(
        "pt restarted after the outage",
        Duration::from_secs(30),
        || async { (job_restarts(&bed, &ml, "pt").await >= 1).then_some(()) },
    )
    .await;
    wait("pt running again", Duration::from_secs(20), || async {
        (running(&bed, &ml, &sel).await.len() >= before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        job_restarts(&bed, &ml, "pt").await,
        1,
        "the fault is acted on once"
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_controller_killed_after_a_restart_and_started_again_restarts_nothing_twice(
    server: Server,
) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    // The job's pods take a while to come back, so the new controller sees
    // the same world the old one left.
    c.create_pytorchjob(&ml, "pt", 2, &[OPT_IN]).await.unwrap();
    let sel = format!("{PT}=pt");
    wait("pt running", T, || async {
        (running(&bed, &ml, &sel).await.len() >= 3).then_some(())
    })
    .await;
    // A node fault too, whose condition stays after the restart.
    let n = node_of(&bed, &ml, &sel).await;
    c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("restarted", T, || async {
        (job_restarts(&bed, &ml, "pt").await == 1).then_some(())
    })
    .await;
    // Killed once its JobRestarted is written (a kill before it loses the
    // Event, and the ending check could not count the restart), before
    // the job runs again: the next controller must tell the ending.
    restarted_notes(&bed, &ml).await;
    ctl.kill();
    xid_condition(&bed, &n, "999").await; // PreSeparate, seen by the next controller only
    let ctl2 = bed
        .start_controller(args(&bed, |a| a.identity = Some("second".into())))
        .await
        .expect("second controller");
    wait(
        "the new controller handles the new fault",
        Duration::from_secs(15),
        || async { cordoned(&node(&bed, &n).await).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        job_restarts(&bed, &ml, "pt").await,
        1,
        "the restart the old controller made is not repeated"
    );
    let cordons = bed
        .requests()
        .into_iter()
        .filter(|r| {
            by_controller(r)
                && r.verb == "patch"
                && r.resource == "nodes"
                && r.subresource.is_empty()
        })
        .count();
    assert_eq!(cordons, 1);
    every_restart_ends(&bed).await;
    ctl2.shutdown().await;
}

async fn two_replicas_one_acts_and_the_other_takes_over_within_the_lease(server: Server) {
    let bed = bed(
        server,
        SimConfig {
            nodes: 4,
            ..SimConfig::default()
        },
    )
    .await;
    let ml = bed.ensure_namespace("ml").await.unwrap();
    bed.apply_yaml(BASE).await.unwrap();
    let lease = Duration::from_secs(2);
    let a = rebound::controller::start(
        bed.controller_client().await.unwrap(),
        args(&bed, |x| {
            x.identity = Some("a".into());
            x.lease_duration = lease;
        }),
    )
    .await
    .unwrap();
    let b = rebound::controller::start(
        bed.controller_client().await.unwrap(),
        args(&bed, |x| {
            x.identity = Some("b".into());
            x.lease_duration = lease;
        }),
    )
    .await
    .unwrap();
    wait("one leader", T, || async {
        (a.leader.is_leader() ^ b.leader.is_leader()).then_some(())
    })
    .await;
    wait("both synced", T, || async {
        (a.health.ready.load(std::sync::atomic::Ordering::Relaxed)
            && b.health.ready.load(std::sync::atomic::Ordering::Relaxed))
        .then_some(())
    })
    .await;
    let c = &bed.cluster;
    c.create_pytorchjob(&ml, "pt", 1, &[OPT_IN]).await.unwrap();
    c.create_pytorchjob(&ml, "pu", 1, &[OPT_IN]).await.unwrap();
    let sel = |j: &str| format!("{PT}={j}");
    wait("running", T, || async {
        (running(&bed, &ml, &sel("pt")).await.len() >= 2
            && running(&bed, &ml, &sel("pu")).await.len() >= 2)
            .then_some(())
    })
    .await;
    c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("one restart", T, || async {
        (job_restarts(&bed, &ml, "pt").await >= 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job_restarts(&bed, &ml, "pt").await,
        1,
        "only the leader acts"
    );
    // Kill the leader without releasing the Lease.
    let (leader, standby) = if a.leader.is_leader() { (a, b) } else { (b, a) };
    let killed = Instant::now();
    leader.kill();
    wait("the standby leads", lease * 3, || async {
        standby.leader.is_leader().then_some(())
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took <= lease * 2,
        "took over after {took:?}; lease {lease:?}"
    );
    c.fail_container(&ml, "pu-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("the new leader restarts", T, || async {
        (job_restarts(&bed, &ml, "pu").await == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job_restarts(&bed, &ml, "pt").await,
        1,
        "no repeat of the old leader's restart"
    );
    every_restart_ends(&bed).await;
    standby.shutdown().await;
}

e2e!(dropped_watches_410s_and_500s_lose_no_fault_and_restart_nothing_twice);
e2e!(an_api_server_outage_loses_no_fault_and_restarts_nothing_twice);
e2e!(a_controller_killed_after_a_restart_and_started_again_restarts_nothing_twice);
/// The step watchdog's gate on the Lease: while it says a step is stuck, the
/// holder stops acting and releases the Lease (a standby could take it at
/// once); when the step ends, it leads again.
async fn a_stuck_step_gives_the_lease_up_until_it_ends(server: Server) {
    use k8s_openapi::api::coordination::v1::Lease;
    use std::sync::atomic::{AtomicBool, Ordering};
    let bed = bed(
        server,
        SimConfig {
            nodes: 1,
            ..SimConfig::default()
        },
    )
    .await;
    let root = bed.root();
    let stuck = std::sync::Arc::new(AtomicBool::new(false));
    let gate = stuck.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let cfg = rebound::controller::leader::LeaseConfig {
        namespace: root.clone(),
        name: "gated".into(),
        identity: "gated-a".into(),
        duration: Duration::from_secs(10),
        retry: Duration::from_millis(200),
        grace: Duration::from_millis(200),
    };
    let (lead, task) = rebound::controller::leader::start(
        bed.controller_client().await.unwrap(),
        cfg,
        stop_rx,
        std::sync::Arc::new(move || !gate.load(Ordering::Acquire)),
    );
    let leases: Api<Lease> = Api::namespaced(bed.client(), &root);
    let holder = || async {
        leases
            .get_opt("gated")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
    };
    wait("leads", T, || async { lead.is_leader().then_some(()) }).await;
    assert_eq!(holder().await.as_deref(), Some("gated-a"));
    // A step is stuck: leadership is dropped and the Lease released long
    // before its 10 s would run out.
    stuck.store(true, Ordering::Release);
    let t = Instant::now();
    wait("the Lease is released", T, || async {
        (!lead.is_leader() && holder().await.is_none()).then_some(())
    })
    .await;
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // Not taken again while stuck.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!lead.is_leader(), "no leadership while stuck");
    assert_eq!(holder().await, None, "not renewed while stuck");
    // The step ended: it leads again.
    stuck.store(false, Ordering::Release);
    wait("leads again", T, || async {
        lead.is_leader().then_some(())
    })
    .await;
    assert_eq!(holder().await.as_deref(), Some("gated-a"));
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
}

e2e!(two_replicas_one_acts_and_the_other_takes_over_within_the_lease);
e2e!(a_stuck_step_gives_the_lease_up_until_it_ends);
