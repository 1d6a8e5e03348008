//! Recovery tiers end to end: jobs wired by `rebound inject` restart in
//! place (nothing deleted, two writes, all ranks start together), only the
//! pods on a faulty node are replaced, unwired jobs fall back to Recreate,
//! and a JobSet with its own InPlaceRestart has only the faulty node's pods
//! deleted. The simulated kubelets run the real agent in every wired pod.

use super::*;
use kube::ResourceExt;
use rebound::inplace::{GENERATION_ANNOTATION, RELEASED_ANNOTATION};
use rebound_sim::cluster::JobOptions;
use std::collections::BTreeMap;

pub(super) use super::tiers_jobs::*;

/// A wired job restarts in place in two writes, its ranks start together,
/// and a second fault during the restart is covered by it.
async fn in_place(server: Server, kind: Kind) {
    // Containers take a second to start, so that the restart surely lasts
    // past the second fault (with no costs it can be over before it).
    let cfg = starting_in("1s");
    let (bed, ctl) = bed_with(server, 4, TIERS, Some(cfg)).await;
    let ml = bed.ns("ml");
    let pods = running_job(&bed, &ml, kind, 3, true).await;
    let uids: Vec<String> = pods.iter().map(uid).collect();
    let before: BTreeMap<String, i32> = pods
        .iter()
        .map(|p| (p.name_any(), worker_restarts(p)))
        .collect();
    let seen = watch_order(&bed, &ml, kind, before);
    let node = node_name(&pods[0]);
    // A software fault (XID 13, RestartJob) under one pod of the job.
    xid_condition(&bed, &node, "13").await;
    wait("generation 1 raised", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        (a.get(GENERATION_ANNOTATION).map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    // A second fault during the restart (cooldown 0s: only the recovery
    // in progress stops a second one).
    let other = pods
        .iter()
        .map(node_name)
        .find(|n| *n != node)
        .unwrap_or_else(|| node.clone());
    let a = job_annotations(&bed, &ml, kind).await;
    assert_ne!(
        a.get(RELEASED_ANNOTATION).map(String::as_str),
        Some("1"),
        "the second fault comes before the release"
    );
    xid_condition(&bed, &other, "31").await;
    let after = wait("every pod back in place, released", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        let p = running(&bed, &ml, kind.selector()).await;
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1")
            && p.len() == 3
            && p.iter().all(|p| ready(p) && agent_restarts(p) >= 1))
        .then_some(p)
    })
    .await;
    // Same pods: nothing deleted, nothing recreated.
    let mut now: Vec<String> = after.iter().map(uid).collect();
    let mut was = uids.clone();
    now.sort();
    was.sort();
    assert_eq!(now, was, "the same pods");
    assert_eq!(destructive(&bed), Vec::<String>::new());
    // Two writes of the job: the record with the generation, the release.
    wait("both writes logged", T, || async {
        (job_writes(&bed, kind) >= 2).then_some(())
    })
    .await;
    // Every rank's worker started again only after the release.
    let s = wait("every worker seen running again", T, || async {
        seen.lock().expect("seen").release_then_workers(3)
    })
    .await;
    assert!(
        s.1 > s.0,
        "a worker ran again (rv {}) before the barrier was released (rv {})",
        s.1,
        s.0
    );
    // Let the second fault be decided: still one recovery.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = job_annotations(&bed, &ml, kind).await;
    assert_eq!(
        a.get("rebound.dev/restart-count").map(String::as_str),
        Some("1")
    );
    assert_eq!(a.get(GENERATION_ANNOTATION).map(String::as_str), Some("1"));
    // Followed until the job trains again: one JobResumed, in place.
    let notes = resumed(&bed, &ml, JOB, 1).await;
    assert!(notes[0].contains("InPlace restart"), "{notes:?}");
    every_restart_ends(&bed).await;
    // Still one record, one release once the job ran again (the mark
    // that its ending was told is not the restart's: `ending_mark`).
    assert_eq!(job_writes(&bed, kind), 2, "one record, one release");
    ctl.shutdown().await;
}

async fn only_the_pod_on_a_faulty_node_is_replaced_the_others_restart_in_place(server: Server) {
    // One pod per 8-GPU node, as training jobs run: a scheduler that packs
    // (the real vc-scheduler's binpack) cannot put two on one node, and a
    // fourth node is free for the replacement.
    let cfg = SimConfig {
        nodes: 4,
        gpus_per_pod: 8,
        ..SimConfig::default()
    };
    let (bed, ctl) = bed_with(server, 4, TIERS, Some(cfg)).await;
    let ml = bed.ns("ml");
    let kind = Kind::Volcano;
    let pods = running_job(&bed, &ml, kind, 3, true).await;
    // The node with the fewest of the job's pods is the faulty one, so pods
    // on other nodes remain to restart in place even when the scheduler
    // placed two on one node.
    let victim = pods
        .iter()
        .min_by_key(|v| pods.iter().filter(|p| node_name(p) == node_name(v)).count())
        .cloned()
        .expect("the job has pods");
    let node = node_name(&victim);
    let stay: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(&node))
        .map(uid)
        .collect();
    assert!(
        !stay.is_empty(),
        "every pod of the job on one node: nothing left to restart in place"
    );
    // XID 79 (Separate): the node is taken out; its pod must move.
    xid_condition(&bed, &node, "79").await;
    let after = wait("replaced and restarted in place, released", T, || async {
        let a = job_annotations(&bed, &ml, kind).await;
        let p = running(&bed, &ml, kind.selector()).await;
        (a.get(RELEASED_ANNOTATION).map(String::as_str) == Some("1")
            && p.len() == 3
            && p.iter().all(ready)
            && !p.iter().any(|p| uid(p) == uid(&victim)))
        .then_some(p)
    })
    .await;
    for p in &after {
        if stay.contains(&uid(p)) {
            assert!(
                agent_restarts(p) >= 1,
                "{} restarted in place",
                p.name_any()
            );
        } else {
            assert_ne!(
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
                Some(node.as_str()),
                "the replacement runs elsewhere"
            );
        }
    }
    assert_eq!(
        after.iter().filter(|p| stay.contains(&uid(p))).count(),
        stay.len(),
        "the pods on healthy nodes stayed"
    );
    // The scheduler may have placed more than one of the job's pods on the
    // faulty node: exactly those are deleted, each once, and no other.
    let mut moved: Vec<String> = pods
        .iter()
        .filter(|p| !stay.contains(&uid(p)))
        .map(|p| format!("delete /api/v1/namespaces/{ml}/pods/{}", p.name_any()))
        .collect();
    moved.sort();
    let mut d = destructive(&bed);
    d.sort();
    assert_eq!(d, moved, "exactly the pods on the faulty node deleted");
    assert!(cordoned(&super::node(&bed, &node).await));
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn an_unwired_job_falls_back_to_recreate_and_says_why(server: Server) {
    let (bed, ctl) = bed_with(server, 4, TIERS, None).await;
    let ml = bed.ns("ml");
    let kind = Kind::Volcano;
    let pods = running_job(&bed, &ml, kind, 2, false).await;
    let node = node_name(&pods[0]);
    xid_condition(&bed, &node, "13").await;
    wait("restarted by a Volcano Command", T, || async {
        (!requests(&bed, "create", "commands", "").is_empty()).then_some(())
    })
    .await;
    let notes = restarted_notes(&bed, &ml).await;
    assert!(
        notes.iter().any(|n| n.contains("lack the in-place wiring")),
        "{notes:?}"
    );
    let a = job_annotations(&bed, &ml, kind).await;
    // A Recreate releases its generation at once: new pods start at once.
    assert_eq!(a.get(GENERATION_ANNOTATION), a.get(RELEASED_ANNOTATION));
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_jobset_with_its_own_in_place_restart_loses_only_the_faulty_nodes_pod(server: Server) {
    let (bed, ctl) = bed_with(server, 4, TIERS, None).await;
    let ml = bed.ns("ml");
    bed.cluster
        .create_jobset_with(
            &ml,
            "js",
            2,
            1,
            serde_json::json!({"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}),
            &JobOptions::labels(&[OPT_IN]),
        )
        .await
        .expect("create the JobSet");
    let sel = "jobset.sigs.k8s.io/jobset-name=js";
    let pods = wait("the JobSet's pods running", T, || async {
        let p = running(&bed, &ml, sel).await;
        (p.len() >= 2).then_some(p)
    })
    .await;
    let nodes: Vec<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    // A software fault: JobSet's own protocol restarts in place; rebound
    // leaves it.
    xid_condition(&bed, &nodes[0], "13").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(destructive(&bed), Vec::<String>::new());
    // A node fault: the pod there must move; only it is deleted.
    let on_node: Vec<String> = pods
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&nodes[1]))
        .map(|p| p.name_any())
        .collect();
    xid_condition(&bed, &nodes[1], "79").await;
    let d = wait("the faulty node's pod deleted", T, || async {
        let d = destructive(&bed);
        (!d.is_empty()).then_some(d)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let d2 = destructive(&bed);
    assert_eq!(d, d2, "nothing more deleted");
    assert_eq!(d.len(), on_node.len(), "{d:?} vs {on_node:?}");
    for p in &on_node {
        assert!(
            d.iter()
                .any(|r| r.starts_with("delete ") && r.ends_with(&format!("/pods/{p}"))),
            "{d:?}"
        );
    }
    // The pod deleted on the faulty node takes its grace period (30 s)
    // before JobSet makes its replacement.
    every_restart_ends_within(&bed, Duration::from_secs(45)).await;
    ctl.shutdown().await;
}

async fn a_wired_volcano_job_restarts_in_place_in_two_writes_its_ranks_together(server: Server) {
    in_place(server, Kind::Volcano).await;
}

async fn a_wired_jobset_restarts_in_place_in_two_writes_its_ranks_together(server: Server) {
    in_place(server, Kind::JobSet).await;
}

async fn a_wired_batch_job_restarts_in_place_in_two_writes_its_ranks_together(server: Server) {
    in_place(server, Kind::Batch).await;
}

e2e!(a_wired_volcano_job_restarts_in_place_in_two_writes_its_ranks_together);
e2e!(a_wired_jobset_restarts_in_place_in_two_writes_its_ranks_together);
e2e!(a_wired_batch_job_restarts_in_place_in_two_writes_its_ranks_together);
e2e!(only_the_pod_on_a_faulty_node_is_replaced_the_others_restart_in_place);
e2e!(an_unwired_job_falls_back_to_recreate_and_says_why);
e2e!(a_jobset_with_its_own_in_place_restart_loses_only_the_faulty_nodes_pod);
