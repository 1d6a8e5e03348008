//! `rebound demo`: the embedded cluster and the controller in one process,
//! the samples applied, a PyTorchJob and two Volcano Jobs running (one
//! wired for in-place restarts), four faults injected, and a readable
//! timeline of what rebound saw, decided and did.

use super::cluster::{SimConfig, pod_running};
use super::testbed::{ROOT, Testbed};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use rebound_core::fault::wire::{self, WireFault};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod inplace;
mod timeline;

use inplace::in_place;
use timeline::timeline_entry;

/// `rebound demo` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Keep the API server up after the demo and write a kubeconfig, so
    /// `kubectl get nodes,pods,recoverypolicies -A` works against it.
    #[arg(long)]
    pub serve: bool,
    /// Where `--serve` writes the kubeconfig.
    #[arg(long, default_value = "rebound-demo.kubeconfig")]
    pub kubeconfig: std::path::PathBuf,
}

struct Clock(Instant);

impl Clock {
    fn say(&self, what: &str) {
        println!("[{:>7.3}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

const OPT_IN: (&str, &str) = ("kcover.io/cascading-recovery", "true");

/// Run the demo; exits non-zero when an expected recovery does not happen.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let clock = Clock(Instant::now());
    println!(
        "rebound demo: an embedded Kubernetes API server, 20 simulated GPU nodes, the Kubeflow and Volcano operators, and the rebound controller in one process.\n"
    );
    let bed = Testbed::start(SimConfig {
        nodes: 20,
        gpus_per_node: 8,
        namespaces: vec!["ml-research".into()],
        ..SimConfig::default()
    })
    .await?;
    let n = bed.apply_samples().await?;
    clock.say(&format!("applied {n} sample objects (FaultClassifications for NVIDIA XIDs, Ascend codes, exits, conditions; RecoveryPolicies cluster-default, team-a, team-b dry run)"));
    let ctl = bed.start_controller(bed.controller_args()).await?;
    clock.say(&format!(
        "controller leading, caches synced (metrics on http://{}/metrics)",
        ctl.listen
    ));
    let mut decisions = ctl.subscribe_decisions();
    let t0d = clock.0;
    let decision_printer = tokio::spawn(async move {
        while let Ok(d) = decisions.recv().await {
            print!("{}", timeline_entry(t0d, &d));
        }
    });

    // The timeline: every Event rebound writes.
    let client = bed.client();
    let events: Api<Event> = Api::all(client.clone());
    let t0 = clock.0;
    let since = chrono::Utc::now();
    let printer = tokio::spawn(async move {
        let s = watcher(events, watcher::Config::default())
            .applied_objects()
            .default_backoff();
        futures::pin_mut!(s);
        while let Some(Ok(e)) = s.next().await {
            if e.reporting_controller.as_deref()
                != Some(rebound::recover::events::REPORTING_CONTROLLER)
            {
                continue;
            }
            let when = e
                .event_time
                .as_ref()
                .map(|t| rebound::k8s::time::to_chrono(&t.0));
            if when.is_some_and(|w| w < since) {
                continue;
            }
            let obj = e
                .regarding
                .as_ref()
                .map(|r| {
                    format!(
                        "{}/{}",
                        r.kind.clone().unwrap_or_default(),
                        r.name.clone().unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            println!(
                "[{:>7.3}s]   rebound: {:<22} {obj}: {}",
                t0.elapsed().as_secs_f64(),
                e.reason.clone().unwrap_or_default(),
                e.note.clone().unwrap_or_default()
            );
        }
    });

    let c = &bed.cluster;
    c.create_pytorchjob("ml-research", "llm-pretrain", 4, &[OPT_IN])
        .await?;
    c.create_volcano_job("team-a", "vc-train", 2, &[OPT_IN])
        .await?;
    c.wait_for_pods_running(
        "ml-research",
        "training.kubeflow.org/job-name=llm-pretrain",
        5,
        Duration::from_secs(10),
    )
    .await?;
    c.wait_for_pods_running(
        "team-a",
        "volcano.sh/job-name=vc-train",
        2,
        Duration::from_secs(10),
    )
    .await?;
    clock.say("PyTorchJob ml-research/llm-pretrain (master + 4 workers; covered by the cluster default policy) and Volcano Job team-a/vc-train (2 pods; covered by team-a's own policy) are running, both opted in with kcover.io/cascading-recovery=true");

    let mut ok = true;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    let ml: Api<Pod> = Api::namespaced(client.clone(), "ml-research");

    // 1. A worker exits with Error.
    println!();
    let before = uids(&ml, "training.kubeflow.org/job-name=llm-pretrain").await?;
    clock.say(
        "FAULT 1: container pytorch of ml-research/llm-pretrain-worker-1 exits with code 1 (Error)",
    );
    c.fail_container(
        "ml-research",
        "llm-pretrain-worker-1",
        "pytorch",
        1,
        "Error",
    )
    .await?;
    ok &= wait_restarted(
        &clock,
        &ml,
        "training.kubeflow.org/job-name=llm-pretrain",
        &before,
        5,
        "llm-pretrain",
    )
    .await;

    // 2. XID 79 on the node running a vc-train pod.
    println!();
    let node = pods
        .list(&ListParams::default().labels("volcano.sh/job-name=vc-train"))
        .await?
        .items
        .iter()
        .find_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .unwrap_or_else(|| "node-0000".into());
    let before = uids(&pods, "volcano.sh/job-name=vc-train").await?;
    clock.say(&format!("FAULT 2: the agent on {node} reports XID 79 (GPU has fallen off the bus) on GPU 3 through its GpuFault condition"));
    let msg = wire::format_condition_message(&[WireFault {
        source: "NvidiaXid".into(),
        code: "79".into(),
        device: Some("3".into()),
        message: Some("GPU has fallen off the bus".into()),
        ..Default::default()
    }]);
    c.set_node_condition(&node, wire::GPU_CONDITION, "True", "NvidiaXid", &msg)
        .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    ok &= wait_until(
        &clock,
        "node cordoned and tainted",
        Duration::from_secs(10),
        || {
            let nodes = nodes.clone();
            let node = node.clone();
            async move {
                let n = nodes.get(&node).await.ok()?;
                let s = n.spec?;
                (s.unschedulable == Some(true)
                    && s.taints
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.key == "rebound.dev/separated"))
                .then_some(())
            }
        },
    )
    .await;
    ok &= wait_restarted(
        &clock,
        &pods,
        "volcano.sh/job-name=vc-train",
        &before,
        2,
        "vc-train",
    )
    .await;

    // 3. XID 13 twice on one GPU of another node: the second escalates.
    println!();
    let other = ml
        .list(&ListParams::default().labels("training.kubeflow.org/job-name=llm-pretrain"))
        .await?
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .find(|n| n != &node)
        .unwrap_or_else(|| "node-0001".into());
    for i in 1..=2 {
        clock.say(&format!("FAULT 3.{i}: the agent on {other} reports XID 13 (Graphics Engine Exception) on GPU 0 (structured Event in {ROOT})"));
        xid_event(&client, &other, "13", "0", i).await?;
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    ok &= wait_until(
        &clock,
        &format!("{other} cordoned after the repeat (ResetDevice)"),
        Duration::from_secs(10),
        || {
            let nodes = nodes.clone();
            let other = other.clone();
            async move {
                (nodes.get(&other).await.ok()?.spec?.unschedulable == Some(true)).then_some(())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // 4. The same kind of software fault under a job wired for in-place
    // restarts: its pods stay where they are.
    println!();
    ok &= in_place(&clock, &bed, &[node.as_str(), other.as_str()]).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Summary.
    println!();
    let reqs = c.api().requests();
    let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
    for r in reqs.iter() {
        let rebound_write = matches!(
            (r.verb, r.resource.as_str(), r.subresource.as_str()),
            ("deletecollection", "pods", "")
                | ("delete", "pods", "")
                | ("create", "commands", "")
                | ("patch", "nodes", "")
                | ("create", "configmaps", "")
                | ("create" | "patch", "events", "")
                | ("patch", "pytorchjobs" | "jobs", "")
                | (
                    "patch",
                    "recoverypolicies" | "faultclassifications",
                    "status"
                )
                | ("get", "pods", "log")
        );
        if rebound_write {
            *by_verb
                .entry(format!(
                    "{} {}{}",
                    r.verb,
                    r.resource,
                    if r.subresource.is_empty() {
                        String::new()
                    } else {
                        format!("/{}", r.subresource)
                    }
                ))
                .or_default() += 1;
        }
    }
    let m = ctl.metrics.encode();
    let metric = |name: &str| -> f64 {
        m.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    println!("summary:");
    println!(
        "  decisions that acted:   {}",
        m.lines()
            .filter(|l| l.starts_with("rebound_decisions_total") && l.contains("outcome=\"acted\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    );
    println!(
        "  faults seen:            {}",
        metric("rebound_faults_total")
    );
    println!(
        "  reaction (fault event → action request), mean: {:.2} ms over {} actions",
        1000.0 * metric("rebound_reaction_seconds_sum")
            / metric("rebound_reaction_seconds_count").max(1.0),
        metric("rebound_reaction_seconds_count")
    );
    println!("  rebound's requests (actions, records, Events, status), by verb and resource:");
    for (k, v) in &by_verb {
        println!("    {k:<40} {v}");
    }
    println!(
        "  result: {}",
        if ok {
            "every fault recovered"
        } else {
            "SOME RECOVERIES DID NOT HAPPEN (see above)"
        }
    );

    if args.serve {
        bed.cluster.api().write_kubeconfig(&args.kubeconfig)?;
        println!(
            "\nthe embedded API server keeps running at {}; try:\n  kubectl --kubeconfig {} get nodes,pods,recoverypolicies,faultclassifications -A\npress Ctrl-C to stop",
            bed.cluster.api().url(),
            args.kubeconfig.display()
        );
        let _ = tokio::signal::ctrl_c().await;
    }
    printer.abort();
    decision_printer.abort();
    ctl.shutdown().await;
    bed.cluster.shutdown().await;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Restarts of the pod's containers (the restart agent's included).
fn restarts(p: &Pod) -> u32 {
    let s = p.status.as_ref();
    s.and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .chain(s.and_then(|s| s.init_container_statuses.as_ref()))
        .flatten()
        .map(|c| c.restart_count.max(0) as u32)
        .sum()
}

async fn uids(pods: &Api<Pod>, selector: &str) -> anyhow::Result<Vec<String>> {
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect())
}

async fn wait_restarted(
    clock: &Clock,
    pods: &Api<Pod>,
    selector: &str,
    before: &[String],
    n: usize,
    job: &str,
) -> bool {
    wait_until(
        clock,
        &format!("{job}: all {n} pods recreated and Running"),
        Duration::from_secs(10),
        || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(selector))
                    .await
                    .ok()?;
                let fresh = list
                    .items
                    .iter()
                    .filter(|p| {
                        pod_running(p)
                            && p.metadata.uid.as_ref().is_some_and(|u| !before.contains(u))
                    })
                    .count();
                (fresh >= n).then_some(())
            }
        },
    )
    .await
}

async fn wait_until<F, Fut>(clock: &Clock, what: &str, timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let start = Instant::now();
    while start.elapsed() < timeout {
        if check().await.is_some() {
            clock.say(&format!("  ✓ {what}"));
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    clock.say(&format!("  ✗ {what}: not within {timeout:?}"));
    false
}

/// Write a structured fault Event the way rebound's agent does.
pub async fn xid_event(
    client: &kube::Client,
    node: &str,
    code: &str,
    device: &str,
    seq: u32,
) -> Result<(), kube::Error> {
    // Events about a Node live in kube-system (a real server refuses them
    // elsewhere but in `default`), with eventTime and what goes with it.
    let api: Api<CoreEvent> =
        Api::namespaced(client.clone(), rebound_core::fault::event::SYSTEM_NAMESPACE);
    let now = chrono::Utc::now();
    let t =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(rebound::k8s::time::to_jiff(now));
    let fault = WireFault {
        source: "NvidiaXid".into(),
        code: code.into(),
        node: Some(node.into()),
        device: Some(device.into()),
        message: Some(format!(
            "NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python"
        )),
        ..Default::default()
    };
    let ev = CoreEvent {
        metadata: ObjectMeta {
            generate_name: Some(format!("{node}-xid-")),
            namespace: Some(rebound_core::fault::event::SYSTEM_NAMESPACE.into()),
            annotations: Some(BTreeMap::from([(
                wire::FAULT_ANNOTATION.to_string(),
                wire::format_annotation(&fault),
            )])),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
        reason: Some("GpuXid".into()),
        message: Some(format!("XID {code} on GPU {device} (occurrence {seq})")),
        type_: Some("Warning".into()),
        event_time: Some(t),
        action: Some("Detected".into()),
        reporting_component: Some("rebound.dev/agent".into()),
        reporting_instance: Some(format!("rebound-agent-{node}")),
        ..Default::default()
    };
    api.create(&PostParams::default(), &ev).await.map(|_| ())
}
