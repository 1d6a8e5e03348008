//! The simulated kubelet restarting a wired pod in place as the real one
//! does (init containers again, the barrier on the agent's startup probe),
//! and agents that lost their watch catching up.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wired_pod_restarts_in_place_waits_at_the_barrier_and_runs_again() {
    let _watchdog = crate::watchdog::start();
    // No start costs, but killing takes a moment, so that the restart's
    // condition is written and seen.
    let costs = PodCosts {
        kill: Duration::from_millis(300),
        ..PodCosts::default()
    };
    let c = wired_cluster(costs).await;
    let before = c
        .wait_for_pods_running(NS, &format!("{JOB_LABEL}=train"), 2, WAIT)
        .await
        .expect("pods run: a job never restarted has no barrier");
    for p in &before {
        let agent = init_status(p, AGENT_CONTAINER);
        assert_eq!(agent.started, Some(true), "barrier open");
        assert_eq!(
            init_status(p, "setup")
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code),
            Some(0)
        );
        assert_eq!(
            condition(p, "AllContainersRestarting").as_deref(),
            Some("False")
        );
    }
    let (seen, recorder) = record_pods(&c);
    let jobs = job_api(&c);

    // Generation 1: every pod's agent exits, the kubelet restarts the pod
    // in place, and the new run of the agent holds the barrier.
    set_generation(&jobs, "train", 1, 0).await;
    let held = wait_for(WAIT, "both pods at the barrier", || async {
        let pods = job_pods(&c).await;
        Ok((pods.len() == 2 && pods.iter().all(|p| at_barrier(p, 1))).then_some(pods))
    })
    .await
    .expect("restarted in place");
    for p in &held {
        let old = before
            .iter()
            .find(|b| b.metadata.name == p.metadata.name)
            .expect("same name");
        assert_eq!(p.metadata.uid, old.metadata.uid, "same pod");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            old.spec.as_ref().and_then(|s| s.node_name.clone()),
            "same node"
        );
        let st = p.status.as_ref().expect("status");
        assert_eq!(
            st.pod_ip,
            old.status.as_ref().and_then(|s| s.pod_ip.clone()),
            "same sandbox"
        );
        assert_eq!(st.phase.as_deref(), Some("Pending"));
        assert_eq!(condition(p, "Initialized").as_deref(), Some("True"));
        assert_eq!(condition(p, "Ready").as_deref(), Some("False"));
        let agent = init_status(p, AGENT_CONTAINER);
        let last = agent
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("agent's last run");
        assert_eq!(last.exit_code, 87, "the rule's code");
        let setup = init_status(p, "setup");
        assert_eq!(setup.restart_count, 1, "init containers ran again");
        let worker = main_status(p);
        let killed = worker
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("worker's last run");
        assert_eq!(killed.exit_code, 137, "killed");
    }
    let restarting_seen = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|p| condition(p, "AllContainersRestarting").as_deref() == Some("True"))
        .filter_map(|p| p.metadata.name.clone())
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(
        restarting_seen.len(),
        2,
        "AllContainersRestarting=True seen on both pods"
    );

    // The workers stay at the barrier; a second generation meanwhile is
    // adopted without another restart.
    tokio::time::sleep(Duration::from_millis(800)).await;
    set_generation(&jobs, "train", 2, 0).await;
    set_generation(&jobs, "train", 2, 1).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let pods = job_pods(&c).await;
    assert!(
        pods.iter().all(|p| at_barrier(p, 1)),
        "still held, not restarted again: {pods:#?}"
    );

    // Released: every pod runs and is Ready again.
    set_generation(&jobs, "train", 2, 2).await;
    let after = c
        .wait_for_pods_running(NS, &format!("{JOB_LABEL}=train"), 2, WAIT)
        .await
        .expect("running again");
    for p in &after {
        assert_eq!(condition(p, "Ready").as_deref(), Some("True"));
        let agent = init_status(p, AGENT_CONTAINER);
        assert_eq!((agent.started, agent.restart_count), (Some(true), 1));
        assert_eq!(init_status(p, "setup").restart_count, 1);
        assert_eq!(main_status(p).restart_count, 1, "every restartCount + 1");
        assert!(before.iter().any(|b| b.metadata.uid == p.metadata.uid));
    }
    // Two agents, each watching that one job only, no lists: one watch per
    // state of the job it saw, each excluding that state (run 1: before
    // any restart; run 2: 1-0, then 2-0, 2-1 and 2-2 as they came).
    let reqs = c.api().requests();
    let agent_watches = reqs
        .iter()
        .filter(|r| {
            r.verb == "watch"
                && r.resource == "pytorchjobs"
                && r.query.contains("fieldSelector=metadata.name%3Dtrain")
        })
        .count();
    let queries: Vec<String> = reqs
        .iter()
        .filter(|r| r.verb == "watch" && r.resource == "pytorchjobs")
        .map(|r| r.query.clone())
        .collect();
    assert_eq!(agent_watches, 2 * 5, "{queries:#?}");
    for state in ["", "%21%3D1-0", "%21%3D2-0", "%21%3D2-1", "%21%3D2-2"] {
        let sel = format!("labelSelector=rebound.dev%2Frestart-state{state}&");
        assert_eq!(
            queries.iter().filter(|q| q.contains(&sel)).count(),
            2,
            "{sel}: {queries:#?}"
        );
    }
    assert!(
        !reqs
            .iter()
            .any(|r| r.verb == "list" && r.query.contains("metadata.name%3Dtrain")),
        "agents never list"
    );
    recorder.abort();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_that_lost_their_watch_catch_up_and_restart_their_pods() {
    let _watchdog = crate::watchdog::start();
    let c = wired_cluster(PodCosts::default()).await;
    let sel = format!("{JOB_LABEL}=train");
    c.wait_for_pods_running(NS, &sel, 2, WAIT)
        .await
        .expect("running");
    // Let both agents settle on their watches, then take watching away:
    // every watch of the job kind fails, the open ones are dropped.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api = c.api().clone();
    api.inject()
        .fail_next_matching(1_000_000, 500, Some("watch"), Some("pytorchjobs"));
    api.inject().drop_watches();
    wait_for(WAIT, "the agents watching again and failing", || {
        let api = api.clone();
        async move {
            let failed = api
                .requests()
                .iter()
                .filter(|r| {
                    r.verb == "watch"
                        && r.status == 500
                        && r.query.contains("metadata.name%3Dtrain")
                })
                .count();
            Ok((failed >= 2).then_some(()))
        }
    })
    .await
    .expect("watches fail");
    set_generation(&job_api(&c), "train", 1, 0).await;
    let t = Instant::now();
    wait_for(
        WAIT,
        "both pods restarted in place without a watch",
        || async {
            let pods = job_pods(&c).await;
            Ok((pods.len() == 2 && pods.iter().all(|p| at_barrier(p, 1))).then_some(()))
        },
    )
    .await
    .expect("caught up by reading the job again");
    eprintln!("agents without a watch caught up in {:?}", t.elapsed());
    api.inject().fail_next_matching(0, 500, None, None);
    set_generation(&job_api(&c), "train", 1, 1).await;
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, WAIT)
        .await
        .expect("released");
    assert!(pods.iter().all(pod_running));
    c.shutdown().await;
}
