//! What an in-place restart costs on the simulated kubelet (kill, init and
//! start again; no devices or sandbox), and the 1,024-pod scale run.

use super::*;

/// With (scaled-down) modelled costs, an in-place restart pays kill, the
/// init containers and the containers again, but no devices or sandbox;
/// a fresh start pays them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_restart_pays_only_kill_init_and_start_again() {
    let _watchdog = crate::watchdog::start();
    let costs = PodCosts::parse(
        "zero,devices=1s,sandbox=3s,image=100ms,start=100ms,init=200ms,ready=200ms,kill=100ms",
    )
    .expect("costs");
    let created = Instant::now();
    let c = wired_cluster(costs.clone()).await;
    let sel = format!("{JOB_LABEL}=train");
    c.wait_for_pods_running(NS, &sel, 2, WAIT)
        .await
        .expect("running");
    let fresh = created.elapsed();
    // devices + sandbox, setup (image, start, run), agent (image, start),
    // worker (image, start); no probes on the worker.
    let fresh_min = costs.devices + costs.sandbox + (costs.image + costs.start) * 3 + costs.init;
    assert!(fresh >= fresh_min, "fresh start {fresh:?} < {fresh_min:?}");
    let jobs = job_api(&c);
    let t = Instant::now();
    set_generation(&jobs, "train", 1, 0).await;
    let held = wait_for(WAIT, "at the barrier", || async {
        let pods = job_pods(&c).await;
        let all = pods.len() == 2 && pods.iter().all(|p| at_barrier(p, 1));
        Ok(all.then(|| t.elapsed()))
    })
    .await
    .expect("held");
    // kill, then setup (image, start, run) and the agent (image, start).
    let to_barrier = costs.kill + (costs.image + costs.start) * 2 + costs.init;
    assert!(
        held >= to_barrier,
        "at the barrier after {held:?} < {to_barrier:?}"
    );
    assert!(
        held < to_barrier + costs.sandbox,
        "the sandbox ({:?}) is not paid again: at the barrier after {held:?}",
        costs.sandbox
    );
    let t = Instant::now();
    set_generation(&jobs, "train", 1, 1).await;
    let resumed = wait_for(WAIT, "running again", || async {
        let pods = job_pods(&c).await;
        let done = pods.len() == 2
            && pods
                .iter()
                .all(|p| pod_running(p) && main_status(p).restart_count == 1);
        Ok(done.then(|| t.elapsed()))
    })
    .await
    .expect("resumed");
    assert!(resumed >= costs.image + costs.start, "{resumed:?}");
    eprintln!(
        "scaled costs: fresh start {fresh:?}; in place: barrier after {held:?}, running {resumed:?} after the release"
    );
    c.shutdown().await;
}

/// At scale (run with `--ignored`): a 1,024-pod wired job on 2,000 nodes,
/// one in-process agent (GET + watch) per pod, restarted in place once.
/// Prints the times; asserts only that every pod restarted in place once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale: about a minute in a debug build"]
async fn scale_1024_wired_pods_restart_in_place() {
    let _watchdog = crate::watchdog::start();
    let c = SimCluster::start(SimConfig {
        nodes: 2000,
        namespaces: vec![NS.into()],
        operators: Operators {
            kubeflow: false,
            volcano: false,
            jobset: false,
            batch: false,
        },
        server_threads: 2,
        ..SimConfig::default()
    })
    .await
    .expect("cluster");
    let job = c
        .api()
        .create_object(json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "namespace": NS},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1024, "template": wired_template()}}},
        }))
        .expect("job");
    let t = Instant::now();
    for i in 0..1024 {
        let mut spec = wired_template()["spec"].clone();
        spec["restartPolicy"] = json!("OnFailure");
        spec["nodeName"] = json!(format!("node-{:04}", i % 2000));
        c.api()
            .create_object(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("train-worker-{i}"), "namespace": NS,
                    "labels": {JOB_LABEL: "train"},
                    "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "name": "train", "uid": job["metadata"]["uid"], "controller": true}]},
                "spec": spec,
            }))
            .expect("pod");
    }
    let sel = format!("{JOB_LABEL}=train");
    c.wait_for_pods_running(NS, &sel, 1024, Duration::from_secs(300))
        .await
        .expect("running");
    eprintln!("1,024 wired pods running after {:?}", t.elapsed());
    c.api().clear_requests();
    let jobs = job_api(&c);
    let t = Instant::now();
    set_generation(&jobs, "train", 1, 0).await;
    wait_for(Duration::from_secs(300), "all at the barrier", || async {
        let pods = job_pods(&c).await;
        Ok((pods.len() == 1024 && pods.iter().all(|p| at_barrier(p, 1))).then_some(()))
    })
    .await
    .expect("held");
    let held = t.elapsed();
    set_generation(&jobs, "train", 1, 1).await;
    c.wait_for_pods_running(NS, &sel, 1024, Duration::from_secs(300))
        .await
        .expect("running again");
    let counts = c.api().request_counts();
    eprintln!(
        "in place: all 1,024 at the barrier after {held:?}, running again after {:?}; requests meanwhile: {counts:?}",
        t.elapsed()
    );
    let pods = job_pods(&c).await;
    assert!(pods.iter().all(|p| main_status(p).restart_count == 1));
    c.shutdown().await;
}
