//! The simulated cluster's actors against the embedded API server: job
//! operators make, schedule, run and recreate pods as the real ones do.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use rebound_sim::actors::{ascend, jobset as js, kubeflow as kf, volcano as vc};
use rebound_sim::cluster::{Accelerator, JobOptions, SimCluster, SimConfig, pod_running, wait_for};
use serde_json::json;

mod job_kinds;
mod kubeflow;
mod nodes;
mod scale;

const NS: &str = "team-a";
const T: Duration = Duration::from_secs(30);

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

fn condition_true(obj: &DynamicObject, t: &str) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == t && c["status"] == "True")
}

async fn pytorchjob(c: &SimCluster, name: &str) -> DynamicObject {
    let api: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &kf::KubeflowKind::PyTorchJob.api_resource());
    api.get(name).await.expect("get pytorchjob")
}

/// The real CRDs of the shared folder, registered in place of the embedded
/// ones: the objects the helpers and operators write must pass them.
#[tokio::test]
async fn jobs_validate_against_the_real_crds() {
    let _watchdog = crate::watchdog::start();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/crds");
    let files = [
        "kubeflow-training-v1/kubeflow.org_pytorchjobs.yaml",
        "volcano/batch.volcano.sh_jobs.yaml",
        "volcano/bus.volcano.sh_commands.yaml",
        "jobset/jobset.x-k8s.io_jobsets.yaml",
    ];
    let mut texts = Vec::new();
    for f in files {
        match std::fs::read_to_string(format!("{dir}/{f}")) {
            Ok(t) => texts.push(t),
            Err(_) => {
                eprintln!("shared CRDs absent at {dir}: skipped");
                return;
            }
        }
    }
    let c = cluster(4).await;
    for t in &texts {
        c.api()
            .register_crds_yaml(t)
            .await
            .expect("register real CRD");
    }
    c.create_pytorchjob(NS, "real", 1, &[("kcover.io/cascading-recovery", "true")])
        .await
        .expect("pytorchjob valid");
    c.create_volcano_job(NS, "realvj", 1, &[])
        .await
        .expect("vcjob valid");
    c.create_jobset(NS, "realjs", 1, 1, 0, &[])
        .await
        .expect("jobset valid");
    c.wait_for_pods_running(NS, &format!("{}=real", kf::JOB_NAME_LABEL), 2, T)
        .await
        .expect("pytorch pods");
    c.wait_for_pods_running(NS, &format!("{}=realvj", vc::JOB_NAME), 1, T)
        .await
        .expect("volcano pods");
    c.wait_for_pods_running(NS, &format!("{}=realjs", js::JOBSET_NAME), 1, T)
        .await
        .expect("jobset pods");
    // Status written by the operators survives the real schemas.
    let pj = pytorchjob(&c, "real").await;
    wait_for(T, "Running condition", || async {
        Ok(condition_true(&pytorchjob(&c, "real").await, "Running").then_some(()))
    })
    .await
    .expect("status accepted by the real schema");
    assert_eq!(
        pj.data["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"],
        1
    );
    let vj: Api<DynamicObject> = Api::namespaced_with(c.client(), NS, &vc::job_resource());
    assert_eq!(
        vj.get("realvj").await.expect("vcjob").data["spec"]["maxRetry"],
        3,
        "schema default"
    );
    c.shutdown().await;
}

/// A pod create the server refuses puts the job into a backoff (200 ms,
/// doubling) before the operator tries again, so a failing server sees
/// one request per wait, not a storm, and the pod comes up in the end.
#[tokio::test]
async fn refused_pod_creates_are_retried_after_a_growing_backoff() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(1).await;
    c.api().clear_requests();
    c.api()
        .inject()
        .fail_next_matching(3, 500, Some("create"), Some("pods"));
    c.create_pytorchjob(NS, "flaky", 0, &[])
        .await
        .expect("create job");
    let sel = format!("{}=flaky", kf::JOB_NAME_LABEL);
    c.wait_for_pods_running(NS, &sel, 1, T)
        .await
        .expect("pod running after the refusals");
    let creates: Vec<_> = c
        .api()
        .requests()
        .into_iter()
        .filter(|r| r.verb == "create" && r.resource == "pods" && r.subresource.is_empty())
        .filter(|r| r.namespace.as_deref() == Some(NS))
        .collect();
    let statuses: Vec<u16> = creates.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [500, 500, 500, 201], "one create per wait");
    for (i, want) in [200u64, 400, 800].into_iter().enumerate() {
        let gap = creates[i + 1].at.duration_since(creates[i].at);
        assert!(
            gap >= Duration::from_millis(want) && gap < Duration::from_millis(want + 1500),
            "wait {i}: {gap:?}, want about {want} ms"
        );
    }
    c.shutdown().await;
}
