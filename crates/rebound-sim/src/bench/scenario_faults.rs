//! The scenarios' faults written into the cluster (container exits,
//! XID node conditions, storms, flapping, a tenant's Event flood beside
//! other namespaces' faults), each with when it started and when its write
//! was answered, for the reaction times.

use super::*;

/// Injects the scenario's faults, recording when each started and when
/// the injector had its write answered.
pub(super) async fn inject(
    env: &SimEnv,
    args: &SimArgs,
    jobs: usize,
    workers: u32,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Injected>> {
    let bed = &env.bed;
    let node_names = bed.cluster.node_names();
    let faults = args.faults.unwrap_or(match args.scenario.as_str() {
        "storm" => (args.nodes() / 4).max(1),
        "tenant-flood" => 20,
        _ => 100,
    });
    let mut injected: Vec<Injected> = Vec::new();
    match args.scenario.as_str() {
        "pod-exit" => {
            for i in 0..faults.min(jobs) {
                injected.push(pod_exit(env, i, jobs, workers).await?);
                tokio::time::sleep(args.interval).await;
            }
        }
        "tenant-flood" => {
            let flood = super::tenant_flood::Flood::new(args, faults);
            injected.extend(flood.run(env, jobs, workers, notes).await?);
        }
        "node-xid" => {
            for node in node_names.iter().take(faults) {
                let mut inj = Injected::new(
                    SystemTime::now(),
                    Subject::Node(node.clone()),
                    "nodes",
                    node,
                );
                set_xid(bed, node, "79").await?;
                inj.answered = Some(SystemTime::now());
                injected.push(inj);
                tokio::time::sleep(args.interval).await;
            }
        }
        "storm" => {
            let start = SystemTime::now();
            let results: Vec<Injected> = futures::stream::iter(node_names.iter().take(faults))
                .map(|n| async move {
                    let mut inj = Injected::new(start, Subject::Node(n.clone()), "nodes", n);
                    match set_xid(bed, n, "79").await {
                        Ok(()) => inj.answered = Some(SystemTime::now()),
                        Err(e) => eprintln!("sim: {e}"),
                    }
                    inj
                })
                .buffer_unordered(64)
                .collect()
                .await;
            injected.extend(results);
        }
        _ => {
            // flapping: one node's XID 48 (ResetDevice) comes and goes.
            let Some(node) = node_names.first().cloned() else {
                notes.push("flapping needs at least one node".into());
                return Ok(injected);
            };
            for _ in 0..faults.min(20) {
                let mut inj = Injected::new(
                    SystemTime::now(),
                    Subject::Node(node.clone()),
                    "nodes",
                    &node,
                );
                set_xid(bed, &node, "48").await?;
                inj.answered = Some(SystemTime::now());
                injected.push(inj);
                tokio::time::sleep(Duration::from_millis(300)).await;
                bed.cluster
                    .set_node_condition(&node, wire::GPU_CONDITION, "False", "Healthy", "")
                    .await?;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    Ok(injected)
}

/// Job `i`'s (spread over the jobs) worker, or its master when it has no
/// workers, exits with code 1.
pub(super) async fn pod_exit(
    env: &SimEnv,
    i: usize,
    jobs: usize,
    workers: u32,
) -> anyhow::Result<Injected> {
    let job = format!("job-{}", (i * 7919) % jobs.max(1));
    let pod = if workers > 0 {
        format!("{job}-worker-0")
    } else {
        format!("{job}-master-0")
    };
    let mut inj = Injected::new(SystemTime::now(), Subject::Job(job), "pods", &pod);
    env.bed
        .cluster
        .fail_container(&env.ns, &pod, "pytorch", 1, "Error")
        .await?;
    inj.answered = Some(SystemTime::now());
    Ok(inj)
}

pub(super) async fn set_xid(bed: &Testbed, node: &str, code: &str) -> anyhow::Result<()> {
    let msg = wire::format_condition_message(&[WireFault {
        source: "NvidiaXid".into(),
        code: code.into(),
        device: Some("0".into()),
        ..Default::default()
    }]);
    bed.cluster
        .set_node_condition(node, wire::GPU_CONDITION, "True", "NvidiaXid", &msg)
        .await?;
    Ok(())
}
