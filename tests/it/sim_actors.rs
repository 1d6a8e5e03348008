//! The simulated cluster's actors against the embedded API server: job
//! operators make, schedule, run and recreate pods as the real ones do.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use rebound::sim::actors::{ascend, jobset as js, kubeflow as kf, volcano as vc};
use rebound::sim::cluster::{
    Accelerator, JobOptions, SimCluster, SimConfig, pod_running, wait_for,
};
use serde_json::json;

const NS: &str = "team-a";
const T: Duration = Duration::from_secs(20);

async fn cluster(nodes: usize) -> SimCluster {
    SimCluster::start(SimConfig {
        nodes,
        namespaces: vec![NS.into()],
        ..SimConfig::default()
    })
    .await
    .expect("start sim cluster")
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().filter_map(|p| p.uid()).collect()
}

async fn pod(c: &SimCluster, name: &str) -> Option<Pod> {
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    api.get_opt(name).await.expect("get pod")
}

#[tokio::test]
async fn pytorchjob_pods_are_created_scheduled_running_and_recreated() {
    let c = cluster(4).await;
    c.create_pytorchjob(NS, "train", 3, &[("kcover.io/cascading-recovery", "true")])
        .await
        .expect("create job");
    let sel = format!("{}=train", kf::JOB_NAME_LABEL);
    let pods = c
        .wait_for_pods_running(NS, &sel, 4, T)
        .await
        .expect("pods running");
    let names: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        names,
        BTreeSet::from(
            [
                "train-master-0",
                "train-worker-0",
                "train-worker-1",
                "train-worker-2"
            ]
            .map(String::from)
        )
    );
    for p in &pods {
        let l = p.labels();
        assert_eq!(
            l.get("kcover.io/cascading-recovery").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            l.get(kf::OPERATOR_NAME_LABEL).map(String::as_str),
            Some("pytorchjob-controller")
        );
        assert!(l.contains_key(kf::REPLICA_INDEX_LABEL));
        let owner = &p.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("PyTorchJob", Some(true))
        );
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(node.starts_with("node-"), "scheduled: {node}");
        let cs = &p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default()[0];
        assert!(
            cs.ready
                && cs
                    .state
                    .as_ref()
                    .and_then(|s| s.running.as_ref())
                    .is_some_and(|r| r.started_at.is_some())
        );
    }
    let master = pods
        .iter()
        .find(|p| p.name_any() == "train-master-0")
        .expect("master");
    assert_eq!(
        master.labels().get(kf::JOB_ROLE_LABEL).map(String::as_str),
        Some("master")
    );
    // Spread: 4 pods on 4 nodes.
    let nodes: HashSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes.len(), 4, "pods spread over the nodes");

    // Delete them all: the operator recreates them (new uids).
    let before = uids(&pods);
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    for p in &pods {
        api.delete(&p.name_any(), &DeleteParams::default())
            .await
            .expect("delete pod");
    }
    let again = wait_for(T, "4 new running pods", || {
        let api = api.clone();
        let sel = sel.clone();
        let before = before.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(&sel)).await?;
            let fresh: Vec<Pod> = pods
                .items
                .into_iter()
                .filter(|p| pod_running(p) && !before.contains(&p.uid().unwrap_or_default()))
                .collect();
            Ok((fresh.len() == 4).then_some(fresh))
        }
    })
    .await
    .expect("pods recreated");
    assert!(uids(&again).is_disjoint(&before));
    c.shutdown().await;
}
