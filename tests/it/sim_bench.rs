//! `rebound sim` (`rebound_sim::bench::measure`) on each kind of server,
//! at a small scale: the embedded one (server clock from its request log),
//! a cluster by kubeconfig (a bare embedded server standing in: client
//! clock only), and a real control plane from `REBOUND_TEST_ASSETS`
//! (server clock from kube-apiserver's audit log). Only the plumbing of the
//! figures is asserted (counts, sources), never their values.

use rebound_sim::bench::{SimArgs, measure};

fn args(flags: &[&str]) -> SimArgs {
    SimArgs::from_flags(flags).expect("flags")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_node_faults_are_measured_on_the_server_and_the_client_clock() {
    let _watchdog = crate::watchdog::start();
    let r = measure(&args(&[
        "--nodes",
        "10",
        "--pods-per-node",
        "2",
        "--job-size",
        "4",
        "--scenario",
        "node-xid",
        "--faults",
        "1",
        "--in-process",
    ]))
    .await
    .expect("sim");
    assert_eq!((r.nodes, r.pods, r.jobs, r.faults_injected), (10, 20, 5, 1));
    assert_eq!(
        r.sources.server_timing.as_deref(),
        Some("embedded request log")
    );
    let server = r.reaction_ms.as_ref().expect("server clock");
    assert_eq!(server.count, 1, "{r:?}");
    assert_eq!(r.client_reaction_ms.count, 1, "{r:?}");
    assert_eq!(r.nodes_cordoned, 1);
    assert_eq!(r.breaker_limit, 1);
    assert!(
        r.controller_requests_by_verb.contains_key("patch nodes"),
        "{r:?}"
    );
    assert!(r.peak_write_rate_per_second.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_flood_restarts_only_the_other_namespaces_jobs_and_reports_the_steps() {
    let _watchdog = crate::watchdog::start();
    let r = measure(&args(&[
        "--nodes",
        "4",
        "--pods-per-node",
        "2",
        "--job-size",
        "2",
        "--scenario",
        "tenant-flood",
        "--faults",
        "2",
        "--flood-events",
        "20",
        "--flood-kib",
        "4",
        "--in-process",
    ]))
    .await
    .expect("sim");
    assert_eq!(r.faults_injected, 2, "{r:?}");
    assert_eq!(r.jobs_restarted, 2, "the other namespace's faults: {r:?}");
    assert_eq!(r.max_restarts_of_one_job, 1);
    assert_eq!(r.nodes_cordoned, 0, "the flood cordons nothing");
    let steps = r.core_step_ms.as_ref().expect("the core's step histogram");
    assert!(steps.count > 20, "every Event is a step: {steps:?}");
    assert!(r.core_steps_over_100ms.is_some());
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("tenant-flood: 20 of 20 fault Events written")),
        "{:?}",
        r.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_by_kubeconfig_is_measured_on_the_client_clock_only() {
    let _watchdog = crate::watchdog::start();
    let path = std::env::temp_dir().join(format!(
        "rebound-sim-bench-bare-{}.kubeconfig",
        std::process::id()
    ));
    let server = rebound_sim::bare::start(0, &path)
        .await
        .expect("bare server");
    let kc = path.to_string_lossy().to_string();
    let r = measure(&args(&[
        "--nodes",
        "4",
        "--pods-per-node",
        "4",
        "--job-size",
        "4",
        "--faults",
        "3",
        "--in-process",
        "--kubeconfig",
        &kc,
    ]))
    .await
    .expect("sim");
    assert_eq!((r.pods, r.jobs, r.faults_injected), (16, 4, 3));
    assert_eq!(r.sources.server_timing, None);
    assert!(r.reaction_ms.is_none() && r.reaction_from_injection_ms.is_none());
    assert!(r.peak_write_rate_per_second.is_none());
    assert_eq!(r.client_reaction_ms.count, 3, "{r:?}");
    assert_eq!(r.client_reaction_from_injection_ms.count, 3);
    assert_eq!(r.jobs_restarted, 3, "{r:?}");
    assert_eq!(r.max_restarts_of_one_job, 1);
    assert!(
        r.sources.restarts.contains("annotations"),
        "{:?}",
        r.sources
    );
    assert!(r.sources.requests.contains("own"), "{:?}", r.sources);
    assert!(r.sources.server.contains("--kubeconfig"));
    // The run removed what it made: no fake node is left.
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&path).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("config"),
    )
    .expect("client");
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let left = nodes.list(&Default::default()).await.expect("nodes").items;
    assert!(left.is_empty(), "{} nodes left", left.len());
    server.shutdown().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_control_plane_is_measured_from_its_audit_log() {
    let _watchdog = crate::watchdog::start();
    if let Err(e) = rebound_sim::envtest::ControlPlaneConfig::resolve() {
        assert!(
            !rebound_sim::envtest::real_server_required(),
            "no real control plane: {e}"
        );
        eprintln!("SKIPPED: the real-control-plane run of rebound sim: {e}");
        return;
    }
    let r = measure(&args(&[
        "--nodes",
        "4",
        "--pods-per-node",
        "4",
        "--job-size",
        "4",
        "--faults",
        "3",
        "--in-process",
        "--assets",
    ]))
    .await
    .expect("sim");
    assert_eq!(r.faults_injected, 3);
    assert_eq!(
        r.sources.server_timing.as_deref(),
        Some("kube-apiserver audit log")
    );
    assert!(
        r.sources.server.contains("kube-apiserver v"),
        "{:?}",
        r.sources
    );
    let server = r.reaction_ms.as_ref().expect("server clock");
    assert_eq!(server.count, 3, "{r:?}");
    assert!(
        server.p50 > 0.0,
        "the action follows the commit: {server:?}"
    );
    assert_eq!(r.client_reaction_ms.count, 3, "{r:?}");
    assert_eq!(r.jobs_restarted, 3, "{r:?}");
    assert_eq!(
        r.controller_requests_by_verb.get("deletecollection pods"),
        Some(&3)
    );
    assert!(
        r.notes.iter().all(|n| !n.contains("add up to")),
        "restart records and requests agree: {:?}",
        r.notes
    );
}

/// `rebound sim --scenario resume`, small: a wired Volcano Job of 16 pods
/// on 20 nodes with cheap pod costs, recovered once per tier. Asserts the
/// report's shape and what the tiers must do whatever the costs: in place
/// is quicker than recreate and deletes nothing, with at most two
/// recovery writes by rebound; ReplaceFaulty replaces exactly the pods of
/// the faulty node; Recreate replaces every pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_measures_each_tier_on_the_embedded_server() {
    let _watchdog = crate::watchdog::start();
    use rebound_sim::bench::resume;
    let r = resume::measure(&args(&[
        "--scenario",
        "resume",
        "--nodes",
        "20",
        "--job-size",
        "16",
        "--in-process",
        "--pod-costs",
        "zero,schedule=100,schedule-burst=4,devices=200ms,sandbox=500ms,image=100ms,start=100ms,init=100ms,ready=200ms,stop=500ms,kill=100ms",
    ]))
    .await
    .expect("sim resume");
    assert_eq!((r.nodes, r.job_size), (20, 16));
    assert_eq!(r.server_timing.as_deref(), Some("embedded request log"));
    let names: Vec<&str> = r.tiers.iter().map(|t| t.tier.as_str()).collect();
    assert_eq!(names, ["InPlace", "ReplaceFaulty", "Recreate"]);
    for t in &r.tiers {
        assert!(t.resumed, "{t:?}");
        assert_eq!(t.tier_recorded.as_deref(), Some(t.tier.as_str()), "{t:?}");
        assert!(t.time_to_resume_s.is_some_and(|s| s > 0.0), "{t:?}");
        assert!(t.client_time_to_resume_s.is_some(), "{t:?}");
        assert!(t.generation.1 > t.generation.0, "a new generation: {t:?}");
        let total = t.total_writes.expect("server log");
        assert!(total >= t.rebound_writes && t.rebound_writes >= 1, "{t:?}");
    }
    let [ip, rf, rc] = &r.tiers[..] else {
        panic!("three tiers")
    };
    assert_eq!(ip.pods_replaced, 0, "{ip:?}");
    assert!(ip.rebound_recovery_writes <= 2, "{ip:?}");
    // The agents hear rebound's generation writes only, not every write
    // of the job: each agent run sees about one event (its exit, or its
    // release), rebound's and the operator's watches (three at most here)
    // every write of the job. Unfiltered, each of the job's writes would
    // reach all 16 agents as well.
    let job_writes: usize = ip
        .total_writes_by_verb
        .iter()
        .filter(|(k, _)| k.contains(" jobs"))
        .map(|(_, n)| n)
        .sum();
    let events = ip.job_watch_events.expect("the embedded server counts");
    assert!(
        job_writes >= 5,
        "the operator writes the job's status: {ip:?}"
    );
    assert!(
        events <= (3 * job_writes + 4 * 16) as u64,
        "{events} watch events for {job_writes} writes of the job: {ip:?}"
    );
    assert!(
        ip.time_to_resume_s < rc.time_to_resume_s,
        "in place {:?} s, recreate {:?} s",
        ip.time_to_resume_s,
        rc.time_to_resume_s
    );
    assert!(!rf.faulty_node_pods.is_empty(), "{rf:?}");
    assert_eq!(rf.replaced_pods, rf.faulty_node_pods, "{rf:?}");
    assert_eq!(rc.pods_replaced, 16, "{rc:?}");
    let pass = |goal: &str| {
        r.goals
            .iter()
            .find(|g| g.goal.contains(goal))
            .unwrap_or_else(|| panic!("no goal {goal:?}: {:?}", r.goals))
            .pass
    };
    assert!(pass("ReplaceFaulty replaced only"), "{:?}", r.goals);
    assert!(pass("≤2 requests"), "{:?}", r.goals);
    floors_hold(&r);
    // The pods run a setup init container, the agent and a worker with a
    // probe: the in-place floor counts the init container again.
    assert_eq!(
        (
            r.pod_shape.regular_inits,
            r.pod_shape.sidecars,
            r.pod_shape.containers
        ),
        (1, 1, 1)
    );
    // kill 0.1 + setup (0.1 + 0.1 + 0.1) + agent (0.1 + 0.1) + worker (0.1 + 0.1) + probe 0.2
    assert!((ip.floor.total_s() - 1.0).abs() < 1e-9, "{:?}", ip.floor);
    assert!(rc.floor.control_plane_s > 0.0, "{:?}", rc.floor);
    assert!(
        rc.last_bound_s
            .is_some_and(|b| b < rc.time_to_resume_s.unwrap_or(0.0)),
        "the control plane's part ends before the resume: {rc:?}"
    );
}

/// Every tier's time is at least its floor: the floor is what the
/// modelled costs and limits allow at best, so a time under it means the
/// simulation skipped a cost it models, or the floor counts one it does not.
fn floors_hold(r: &rebound_sim::bench::resume::ResumeReport) {
    for t in &r.tiers {
        let (ttr, floor) = (t.time_to_resume_s.unwrap_or(0.0), t.floor.total_s());
        assert!(floor > 0.0, "{t:?}");
        assert!(
            ttr >= floor,
            "{}: {ttr:.3} s measured under its floor {floor:.3} s: {:?}",
            t.tier,
            t.floor
        );
    }
}

/// The other job kinds, tiny: each is recovered in every tier, in place
/// without replacing a pod, and no tier beats its floor. The operators run
/// with their published client limits (too few requests here to reach
/// them: the figures at scale come from `rebound sim`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_measures_every_job_kind() {
    let _watchdog = crate::watchdog::start();
    use rebound_sim::bench::resume;
    for kind in ["pytorchjob", "job", "jobset", "trainjob"] {
        let r = resume::measure(&args(&[
            "--scenario",
            "resume",
            "--job-kind",
            kind,
            "--nodes",
            "8",
            "--job-size",
            "6",
            "--in-process",
            "--pod-costs",
            "zero,schedule=100,schedule-burst=4,devices=100ms,sandbox=200ms,image=100ms,start=100ms,init=100ms,ready=200ms,stop=300ms,kill=100ms",
            // The Job controller's pod failure backoff, scaled down from
            // its 10 s (6 deleted pods would wait 320 s): the floor counts
            // it, so a simulated Job controller that did not wait would
            // resume under its floor.
            "--operator-limits",
            "job-failure-backoff=100ms",
        ]))
        .await
        .unwrap_or_else(|e| panic!("sim resume --job-kind {kind}: {e:#}"));
        assert!(
            r.job_kind.contains(match kind {
                "pytorchjob" => "PyTorchJob",
                "job" => "batch Job",
                "jobset" => "JobSet",
                _ => "TrainJob",
            }),
            "{kind}: {}",
            r.job_kind
        );
        for t in &r.tiers {
            assert!(t.resumed, "{kind}: {t:?}");
            assert_eq!(
                t.tier_recorded.as_deref(),
                Some(t.tier.as_str()),
                "{kind}: {t:?}"
            );
        }
        let ip = &r.tiers[0];
        assert_eq!(ip.pods_replaced, 0, "{kind}: {ip:?}");
        // (≤ 2 recovery writes is the design's target; the report's goal
        // line says whether each kind meets it: a batch Job took 3 when
        // this was written, a finding for the controller, not the bench.)
        assert!(ip.rebound_recovery_writes >= 2, "{kind}: {ip:?}");
        assert_eq!(r.tiers[2].pods_replaced, 6, "{kind}: {:?}", r.tiers[2]);
        if !matches!(kind, "pytorchjob" | "jobset" | "trainjob") {
            // 6 deleted pods: 100 ms × 2^5 of backoff before the creates
            // (less the second it may be rounded by); a JobSet's child
            // Job is deleted before its pods: no backoff.
            assert!(
                r.tiers[2].floor.control_plane_s >= 2.2,
                "{kind}: {:?}",
                r.tiers[2].floor
            );
        }
        floors_hold(&r);
    }
}
