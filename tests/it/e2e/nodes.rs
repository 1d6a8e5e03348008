//! Node faults: cordon and taint behind trust and the breaker; jobs on the
//! node restart; auto-uncordon when the fault clears.

use super::*;
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use kube::api::{ObjectMeta, PostParams};
use rebound::fault::wire::{self, WireFault};
use std::collections::BTreeMap;

async fn xid_condition_cordons_taints_and_restarts_the_jobs_on_the_node(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let sel = running_pytorchjob(&bed, &ml, "pt", 1).await;
    let n = node_of(&bed, &ml, &sel).await;
    xid_condition(&bed, &n, "79").await;
    let nd = wait("node cordoned and tainted", T, || async {
        let nd = node(&bed, &n).await;
        let tainted = nd
            .spec
            .as_ref()?
            .taints
            .as_ref()?
            .iter()
            .any(|t| t.key == "rebound.dev/separated");
        (cordoned(&nd) && tainted).then_some(nd)
    })
    .await;
    assert_eq!(
        nd.metadata
            .annotations
            .unwrap_or_default()
            .get("rebound.dev/cordoned")
            .map(String::as_str),
        Some("Separate")
    );
    wait("the job on the node restarted", T, || async {
        (job_restarts(&bed, &ml, "pt").await == 1).then_some(())
    })
    .await;
    // One cordon request for the node.
    let patches = bed
        .requests()
        .into_iter()
        .filter(|r| {
            by_controller(r)
                && r.verb == "patch"
                && r.resource == "nodes"
                && r.subresource.is_empty()
                && r.path.ends_with(&n)
        })
        .count();
    assert_eq!(patches, 1);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn preseparate_cordons_only(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let sel = running_pytorchjob(&bed, &ml, "pt", 1).await;
    let n = node_of(&bed, &ml, &sel).await;
    xid_condition(&bed, &n, "999").await;
    let nd = wait("node cordoned", T, || async {
        let nd = node(&bed, &n).await;
        cordoned(&nd).then_some(nd)
    })
    .await;
    assert!(
        nd.spec
            .unwrap()
            .taints
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != "rebound.dev/separated"),
        "PreSeparate does not taint"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        job_restarts(&bed, &ml, "pt").await,
        0,
        "PreSeparate lets running work finish"
    );
    ctl.shutdown().await;
}

async fn breaker_holds_separations_beyond_the_limit_and_says_so(server: Server) {
    // The limit is 50% of every node the controller sees, the cluster's
    // own nodes included: with 6 nodes 3 may be separated, and 5 fail at
    // once. A cluster with more nodes gets more fake nodes, so that two
    // failures more than the limit are always held.
    let mut fake = 6;
    let (bed, ctl, allowed) = loop {
        let (bed, ctl) = bed_with(server, fake, "", None).await;
        let total = Api::<Node>::all(bed.client())
            .list_metadata(&ListParams::default())
            .await
            .expect("nodes")
            .items
            .len();
        let allowed = rebound::policy::Limit::Percent(50).of(total as u32) as usize;
        if allowed + 2 <= fake {
            break (bed, ctl, allowed);
        }
        ctl.shutdown().await;
        bed.cleanup().await;
        fake = 2 * (total - fake) + 6;
    };
    let names = bed.cluster.node_names();
    for n in names.iter().take(allowed + 2) {
        xid_condition(&bed, n, "79").await;
    }
    wait(&format!("{allowed} nodes cordoned"), T, || async {
        let mut k = 0;
        for n in &names {
            if cordoned(&node(&bed, n).await) {
                k += 1;
            }
        }
        (k == allowed).then_some(())
    })
    .await;
    // The positive control first: the breaker holds the two beyond the
    // limit (decided), and still no more than the limit are cordoned.
    let m = wait("the breaker holding two separations", T, || async {
        let m = ctl.metrics.encode();
        m.lines()
            .any(|l| l.starts_with("rebound_breaker_held_nodes") && l.ends_with(" 2"))
            .then_some(m)
    })
    .await;
    let mut k = 0;
    for n in &names {
        k += usize::from(cordoned(&node(&bed, n).await));
    }
    assert_eq!(k, allowed, "never more than the limit");
    let held = m
        .lines()
        .find(|l| l.starts_with("rebound_breaker_held_nodes"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(held, Some(2.0), "{m}");
    assert!(
        m.lines()
            .any(|l| l.starts_with("rebound_breaker_open") && l.ends_with(" 1"))
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(bed.client());
    wait("a BreakerOpen Event", T, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("BreakerOpen")
                    && e.regarding
                        .as_ref()
                        .and_then(|r| r.name.as_ref())
                        .is_some_and(|n| names.contains(n))
            })
            .then_some(())
    })
    .await;
    ctl.shutdown().await;
}

async fn auto_uncordon_when_the_fault_clears_but_not_a_node_cordoned_by_a_person(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let names = bed.cluster.node_names();
    let (a, b) = (&names[0], &names[1]);
    bed.cluster.set_node_unschedulable(b, true).await.unwrap();
    xid_condition(&bed, a, "48").await;
    xid_condition(&bed, b, "48").await;
    wait("a cordoned by rebound", T, || async {
        cordoned(&node(&bed, a).await).then_some(())
    })
    .await;
    for n in [a, b] {
        bed.cluster
            .set_node_condition(n, wire::GPU_CONDITION, "False", "Healthy", "")
            .await
            .unwrap();
    }
    wait("a uncordoned", T, || async {
        (!cordoned(&node(&bed, a).await)).then_some(())
    })
    .await;
    let nd = node(&bed, a).await;
    assert!(
        !nd.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("rebound.dev/cordoned")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cordoned(&node(&bed, b).await), "a person's cordon stays");
    ctl.shutdown().await;
}

/// Creates a core/v1 Event about a node, with a fault annotation.
async fn fault_event(bed: &Testbed, ns: &str, node: &str, code: &str) -> Result<(), kube::Error> {
    let api: Api<CoreEvent> = Api::namespaced(bed.client(), ns);
    let f = WireFault {
        source: "NvidiaXid".into(),
        code: code.into(),
        node: Some(node.into()),
        device: Some("1".into()),
        message: None,
        ..Default::default()
    };
    let now = chrono::Utc::now();
    let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        rebound::controller::time::to_jiff(now),
    );
    // What a real API server accepts: an Event about a Node lives in
    // `kube-system` (with eventTime and the fields that then go with it);
    // anywhere else only by naming that namespace on the involved object,
    // which is what a tenant can do.
    let system = ns == "kube-system";
    let ev = CoreEvent {
        metadata: ObjectMeta {
            generate_name: Some("fault-".into()),
            namespace: Some(ns.into()),
            annotations: Some(BTreeMap::from([(
                wire::FAULT_ANNOTATION.to_string(),
                wire::format_annotation(&f),
            )])),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            namespace: (!system).then(|| ns.to_string()),
            ..Default::default()
        },
        reason: Some("GpuXid".into()),
        message: Some("xid".into()),
        first_timestamp: (!system).then(|| t.clone()),
        last_timestamp: (!system).then_some(t),
        event_time: system.then(|| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                rebound::controller::time::to_jiff(now),
            )
        }),
        action: system.then(|| "Detected".to_string()),
        reporting_component: system.then(|| "rebound-e2e".to_string()),
        reporting_instance: system.then(|| "rebound-e2e".to_string()),
        type_: Some("Warning".into()),
        ..Default::default()
    };
    api.create(&PostParams::default(), &ev).await.map(|_| ())
}

async fn tenant_event_and_tenant_policy_cannot_cordon_but_kube_system_event_can(server: Server) {
    let greedy = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: greedy, namespace: team-a}
spec:
  nodeActions: {maxSeparated: "100%"}
"#;
    let (bed, ctl) = bed_with(server, 4, greedy, None).await;
    let names = bed.cluster.node_names();
    fault_event(&bed, &bed.ns("team-a"), &names[0], "79")
        .await
        .expect("event");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !cordoned(&node(&bed, &names[0]).await),
        "a tenant's Event must not cordon"
    );
    // The tenant's node actions are refused, and its status says so.
    let rps: Api<rebound::api::RecoveryPolicy> = Api::namespaced(bed.client(), &bed.ns("team-a"));
    wait("status says NodeActionsIgnored", T, || async {
        let p = rps.get("greedy").await.ok()?;
        p.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.reason == "NodeActionsIgnored")
            .then_some(())
    })
    .await;
    // The same Event in kube-system is trusted.
    fault_event(&bed, "kube-system", &names[1], "79")
        .await
        .expect("event");
    wait("root Event cordons", T, || async {
        cordoned(&node(&bed, &names[1]).await).then_some(())
    })
    .await;
    ctl.shutdown().await;
}

e2e!(xid_condition_cordons_taints_and_restarts_the_jobs_on_the_node);
e2e!(preseparate_cordons_only);
e2e!(breaker_holds_separations_beyond_the_limit_and_says_so);
e2e!(auto_uncordon_when_the_fault_clears_but_not_a_node_cordoned_by_a_person);
e2e!(tenant_event_and_tenant_policy_cannot_cordon_but_kube_system_event_can);
