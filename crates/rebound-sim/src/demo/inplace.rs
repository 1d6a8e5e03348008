//! The demo's in-place part: a Volcano Job wired for in-place restarts
//! under a policy that tries in place first, an XID under one of its
//! pods, and the check that the same pods run and are ready again.

use crate::cluster::pod_running;
use crate::testbed::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::{Clock, OPT_IN, restarts, wait_until, xid_event};

/// The namespace, policy and job of the in-place part.
const INPLACE_NS: &str = "team-c";
const INPLACE_JOB: &str = "vc-inplace";
const INPLACE_PODS: usize = 4;
const INPLACE_POLICY: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: in-place-first, namespace: team-c}
spec:
  selector:
    matchLabels: {kcover.io/cascading-recovery: "true"}
  restart:
    tiers: [InPlace, ReplaceFaulty, Recreate]
    fallbackAfter: 2m
"#;

/// A Volcano Job wired as `rebound inject` wires it, under a policy that
/// tries in place first; an XID 13 under one of its pods restarts every
/// pod where it is. True when the same pods run and are ready again after
/// every container restarted.
pub(super) async fn in_place(clock: &Clock, bed: &Testbed, busy: &[&str]) -> anyhow::Result<bool> {
    let c = &bed.cluster;
    let client = bed.client();
    crate::cluster::ensure_namespace(&client, INPLACE_NS).await?;
    bed.apply_yaml(INPLACE_POLICY).await?;
    let selector = format!("volcano.sh/job-name={INPLACE_JOB}");
    c.create_volcano_job_with(
        INPLACE_NS,
        INPLACE_JOB,
        INPLACE_PODS as u32,
        &crate::cluster::JobOptions::labels(&[OPT_IN]).wired(),
        serde_json::json!([]),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), INPLACE_NS);
    let ready_all = |list: &[Pod]| list.len() >= INPLACE_PODS && list.iter().all(pod_ready);
    if !wait_until(
        clock,
        &format!("{INPLACE_NS}/{INPLACE_JOB}: {INPLACE_PODS} pods Running and Ready"),
        Duration::from_secs(20),
        || {
            let pods = pods.clone();
            let selector = selector.clone();
            async move {
                let l = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .ok()?;
                ready_all(&l.items).then_some(())
            }
        },
    )
    .await
    {
        return Ok(false);
    }
    clock.say(&format!("Volcano Job {INPLACE_NS}/{INPLACE_JOB} ({INPLACE_PODS} pods) is running, wired for in-place restarts as `rebound inject` wires it (the restart agent sidecar, its RestartAllContainers rule, its barrier probe); {INPLACE_NS}'s policy tries tiers InPlace, ReplaceFaulty, Recreate"));
    let before = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let restarts_before: BTreeMap<String, u32> = before
        .iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, restarts(p))))
        .collect();
    let Some(node) = before
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .find(|n| !busy.contains(&n.as_str()))
    else {
        clock.say("  ✗ no node of the in-place job is free of the earlier faults");
        return Ok(false);
    };
    clock.say(&format!("FAULT 4: the agent on {node} reports XID 13 (Graphics Engine Exception) on GPU 1, under a pod of {INPLACE_JOB}"));
    let start = Instant::now();
    xid_event(&client, &node, "13", "1", 1).await?;
    let again = wait_until(
        clock,
        &format!("{INPLACE_JOB}: restarted in place, the same {INPLACE_PODS} pods Running and Ready again"),
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            let selector = selector.clone();
            let restarts_before = restarts_before.clone();
            async move {
                let l = pods
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .ok()?;
                // The same pods, each with its containers restarted.
                let every_one_again = l.items.iter().all(|p| {
                    p.metadata
                        .uid
                        .as_ref()
                        .and_then(|u| restarts_before.get(u))
                        .is_some_and(|b| restarts(p) > *b)
                });
                (every_one_again && ready_all(&l.items)).then_some(())
            }
        },
    )
    .await;
    if again {
        clock.say(&format!(
            "  in place: {:.2}s from the fault to every pod ready again; no pod deleted, none created, none rescheduled (pod costs here are the demo's: none; `rebound sim --scenario resume` measures both tiers under modelled costs)",
            start.elapsed().as_secs_f64()
        ));
    }
    Ok(again)
}

/// Running with the Ready condition True.
fn pod_ready(p: &Pod) -> bool {
    pod_running(p)
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
