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

#[tokio::test]
async fn pytorchjob_pods_are_created_scheduled_running_and_recreated() {
    let _watchdog = crate::watchdog::start();
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

#[tokio::test]
async fn restart_policy_never_leaves_a_failed_pod_failed_and_fails_the_job() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(3).await;
    let opts = JobOptions::labels(&[]).restart_policy("Never");
    c.create_pytorchjob_with(NS, "nv", 1, &opts)
        .await
        .expect("create job");
    let sel = format!("{}=nv", kf::JOB_NAME_LABEL);
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    assert!(
        pods.iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Never"))
    );
    let uid = pod(&c, "nv-worker-0")
        .await
        .and_then(|p| p.uid())
        .expect("worker uid");
    c.fail_container(NS, "nv-worker-0", "pytorch", 1, "Error")
        .await
        .expect("fail");
    wait_for(T, "job Failed", || async {
        Ok(condition_true(&pytorchjob(&c, "nv").await, "Failed").then_some(()))
    })
    .await
    .expect("job failed");
    // Give the operator time to (wrongly) act, then check it did not.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p = pod(&c, "nv-worker-0").await.expect("failed pod is kept");
    assert_eq!(p.uid().as_deref(), Some(uid.as_str()), "not recreated");
    let st = p.status.expect("status");
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    let term = st.container_statuses.unwrap_or_default()[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated state");
    assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
    assert!(term.finished_at.is_some());
    c.shutdown().await;
}

#[tokio::test]
async fn restart_policy_on_failure_restarts_the_container_in_place() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(2).await;
    let opts = JobOptions::labels(&[]).restart_policy("OnFailure");
    c.create_pytorchjob_with(NS, "of", 1, &opts)
        .await
        .expect("create job");
    let sel = format!("{}=of", kf::JOB_NAME_LABEL);
    c.wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    let uid = pod(&c, "of-worker-0")
        .await
        .and_then(|p| p.uid())
        .expect("uid");
    c.fail_container(NS, "of-worker-0", "pytorch", 137, "OOMKilled")
        .await
        .expect("fail");
    let p = wait_for(T, "container restarted", || async {
        let p = pod(&c, "of-worker-0").await;
        let restarted = p.as_ref().is_some_and(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| cs[0].restart_count == 1)
        });
        Ok(if restarted && p.as_ref().is_some_and(pod_running) {
            p
        } else {
            None
        })
    })
    .await
    .expect("restarted in place");
    assert_eq!(p.uid().as_deref(), Some(uid.as_str()), "same pod");
    let cs = &p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default()[0];
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("lastState.terminated");
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("OOMKilled"))
    );
    assert!(cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert!(!condition_true(&pytorchjob(&c, "of").await, "Failed"));
    c.shutdown().await;
}

#[tokio::test]
async fn volcano_command_restart_job_restarts_it_and_disappears() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(3).await;
    let job = c
        .create_volcano_job(NS, "vj", 2, &[("kcover.io/cascading-recovery", "true")])
        .await
        .expect("create vcjob");
    let sel = format!("{}=vj", vc::JOB_NAME);
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    for p in &pods {
        assert_eq!(
            p.labels().get(vc::QUEUE_NAME).map(String::as_str),
            Some("default")
        );
        assert_eq!(
            p.labels().get(vc::JOB_NAMESPACE).map(String::as_str),
            Some(NS)
        );
        assert_eq!(
            p.annotations().get(vc::JOB_VERSION).map(String::as_str),
            Some("0")
        );
        assert!(p.annotations().contains_key(vc::TASK_INDEX));
    }
    let jobs: Api<DynamicObject> = Api::namespaced_with(c.client(), NS, &vc::job_resource());
    let cmds: Api<DynamicObject> = Api::namespaced_with(c.client(), NS, &vc::command_resource());
    let uid = job.uid().expect("job uid");
    let cmd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
        "metadata": {"name": "vj-restart", "namespace": NS, "ownerReferences": [{
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vj", "uid": uid, "controller": true}]},
        "action": "RestartJob",
        "reason": "rebound",
        "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vj", "uid": uid, "controller": true},
    }))
    .expect("command");
    cmds.create(&PostParams::default(), &cmd)
        .await
        .expect("create command");
    let before = uids(&pods);
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    let fresh = wait_for(T, "pods of version 1 running", || {
        let api = api.clone();
        let sel = sel.clone();
        let before = before.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(&sel)).await?.items;
            let ok = pods.len() == 2
                && pods.iter().all(|p| {
                    pod_running(p)
                        && !before.contains(&p.uid().unwrap_or_default())
                        && p.annotations().get(vc::JOB_VERSION).map(String::as_str) == Some("1")
                });
            Ok(ok.then_some(pods))
        }
    })
    .await
    .expect("restarted");
    assert_eq!(fresh.len(), 2);
    assert!(
        cmds.get_opt("vj-restart")
            .await
            .expect("get command")
            .is_none(),
        "command consumed"
    );
    let j = jobs.get("vj").await.expect("job");
    assert_eq!(j.data["status"]["version"], 1);
    assert_eq!(j.data["status"]["retryCount"], 1);
    let st = wait_for(T, "job Running again", || async {
        let j = jobs.get("vj").await?;
        Ok((j.data["status"]["state"]["phase"] == "Running").then_some(j))
    })
    .await
    .expect("running again");
    let phases: Vec<&str> = st.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["status"].as_str())
        .collect();
    assert!(
        phases.contains(&"Restarting"),
        "went through Restarting: {phases:?}"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn jobset_makes_child_jobs_that_make_pods() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(4).await;
    c.create_jobset(
        NS,
        "js",
        2,
        2,
        1,
        &[("kcover.io/cascading-recovery", "true")],
    )
    .await
    .expect("create jobset");
    let sel = format!("{}=js", js::JOBSET_NAME);
    let pods = c
        .wait_for_pods_running(NS, &sel, 4, T)
        .await
        .expect("pods running");
    let jobs: Api<Job> = Api::namespaced(c.client(), NS);
    let children = jobs
        .list(&ListParams::default().labels(&sel))
        .await
        .expect("list jobs")
        .items;
    let names: BTreeSet<String> = children.iter().map(|j| j.name_any()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["js-workers-0".to_owned(), "js-workers-1".to_owned()])
    );
    for j in &children {
        assert_eq!(j.owner_references()[0].kind, "JobSet");
        assert_eq!(
            j.labels().get(js::RESTART_ATTEMPT).map(String::as_str),
            Some("0")
        );
    }
    for p in &pods {
        let l = p.labels();
        assert_eq!(
            l.get(js::REPLICATED_JOB_NAME).map(String::as_str),
            Some("workers")
        );
        assert!(
            l.contains_key(js::JOB_INDEX)
                && l.contains_key("batch.kubernetes.io/job-completion-index")
        );
        assert_eq!(
            l.get("kcover.io/cascading-recovery").map(String::as_str),
            Some("true")
        );
        assert_eq!(p.owner_references()[0].kind, "Job");
    }
    // A failed pod fails its Job (backoffLimit 0), which restarts the JobSet.
    let victim = pods[0].name_any();
    c.fail_container(NS, &victim, "worker", 1, "Error")
        .await
        .expect("fail");
    let sets: Api<DynamicObject> = Api::namespaced_with(c.client(), NS, &js::api_resource());
    wait_for(T, "jobset restarted", || async {
        let s = sets.get("js").await?;
        Ok((s.data["status"]["restarts"] == 1).then_some(()))
    })
    .await
    .expect("restart counted");
    let sel1 = format!("{sel},{}=1", js::RESTART_ATTEMPT);
    let again = c
        .wait_for_pods_running(NS, &sel1, 4, T)
        .await
        .expect("new attempt running");
    assert!(uids(&again).is_disjoint(&uids(&pods)));
    c.shutdown().await;
}

#[tokio::test]
async fn batch_job_pods_are_recreated_while_active() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(2).await;
    let job = c
        .create_batch_job(NS, "bj", 2, &[("app", "bj")])
        .await
        .expect("create job");
    let sel = "batch.kubernetes.io/job-name=bj";
    let pods = c
        .wait_for_pods_running(NS, sel, 2, T)
        .await
        .expect("running");
    let juid = job.uid().expect("uid");
    for p in &pods {
        let l = p.labels();
        assert_eq!(l.get("batch.kubernetes.io/controller-uid"), Some(&juid));
        assert_eq!(l.get("controller-uid"), Some(&juid));
        assert_eq!(l.get("job-name").map(String::as_str), Some("bj"));
        assert!(p.name_any().starts_with("bj-"));
        assert_eq!(p.owner_references()[0].uid, juid);
    }
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    let victim = pods[0].name_any();
    let index = pods[0]
        .labels()
        .get("batch.kubernetes.io/job-completion-index")
        .cloned();
    api.delete(&victim, &DeleteParams::default())
        .await
        .expect("delete");
    let before = uids(&pods);
    let again = wait_for(T, "replacement running", || {
        let api = api.clone();
        let before = before.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(sel)).await?.items;
            let fresh: Vec<Pod> = pods
                .into_iter()
                .filter(|p| pod_running(p) && !before.contains(&p.uid().unwrap_or_default()))
                .collect();
            Ok((!fresh.is_empty()).then_some(fresh))
        }
    })
    .await
    .expect("replaced");
    assert_eq!(again.len(), 1, "exactly one replacement");
    assert_eq!(
        again[0]
            .labels()
            .get("batch.kubernetes.io/job-completion-index"),
        index.as_ref()
    );
    let jobs: Api<Job> = Api::namespaced(c.client(), NS);
    let st = jobs.get("bj").await.expect("job").status.expect("status");
    assert_eq!(st.active, Some(2));
    c.shutdown().await;
}

#[tokio::test]
async fn cordoned_and_not_ready_nodes_receive_no_new_pods() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(3).await;
    c.set_node_unschedulable("node-0000", true)
        .await
        .expect("cordon");
    c.set_node_ready("node-0001", false)
        .await
        .expect("not ready");
    c.set_node_condition(
        "node-0002",
        "GpuXid",
        "True",
        "Xid79",
        "GPU has fallen off the bus",
    )
    .await
    .expect("condition");
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.create_pytorchjob(NS, "cx", 5, &[]).await.expect("create");
    let sel = format!("{}=cx", kf::JOB_NAME_LABEL);
    let pods = c
        .wait_for_pods_running(NS, &sel, 6, T)
        .await
        .expect("running");
    for p in &pods {
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("node-0002")
        );
    }
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.client());
    let n = nodes.get("node-0002").await.expect("node");
    let conds = n.status.and_then(|s| s.conditions).unwrap_or_default();
    let x = conds
        .iter()
        .find(|c| c.type_ == "GpuXid")
        .expect("condition set");
    assert_eq!(
        (x.status.as_str(), x.reason.as_deref()),
        ("True", Some("Xid79"))
    );
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "other conditions kept"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn ascend_configmap_carries_the_fault_code() {
    let _watchdog = crate::watchdog::start();
    let c = SimCluster::start(SimConfig {
        nodes: 2,
        accelerator: Accelerator::Ascend,
        namespaces: vec![NS.into()],
        ..SimConfig::default()
    })
    .await
    .expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(c.client(), ascend::NAMESPACE);
    let healthy = cms
        .get("mindx-dl-deviceinfo-node-0001")
        .await
        .expect("configmap per node");
    let cfg: serde_json::Value =
        serde_json::from_str(&healthy.data.unwrap_or_default()[ascend::DATA_KEY])
            .expect("DeviceInfoCfg json");
    assert_eq!(
        cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Fault"],
        "[]"
    );
    c.set_ascend_fault("node-0001", 3, &["80E18402", "A8028801"])
        .await
        .expect("fault");
    let cm = cms
        .get("mindx-dl-deviceinfo-node-0001")
        .await
        .expect("configmap");
    assert_eq!(
        cm.labels().get("mx-consumer-cim").map(String::as_str),
        Some("true")
    );
    let cfg: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap_or_default()[ascend::DATA_KEY])
            .expect("DeviceInfoCfg json");
    let list = &cfg["DeviceInfo"]["DeviceList"];
    let faults: serde_json::Value =
        serde_json::from_str(list["huawei.com/Ascend910-Fault"].as_str().unwrap_or(""))
            .expect("fault list");
    assert_eq!(faults[0]["npu_name"], "Ascend910-3");
    assert_eq!(faults[0]["fault_code"], "80E18402,A8028801");
    assert_eq!(list["huawei.com/Ascend910-Unhealthy"], "Ascend910-3");
    assert_eq!(cfg["CheckCode"].as_str().map(str::len), Some(64));
    c.clear_ascend_fault("node-0001", None)
        .await
        .expect("clear");
    let cm = cms
        .get("mindx-dl-deviceinfo-node-0001")
        .await
        .expect("configmap");
    let cfg: serde_json::Value =
        serde_json::from_str(&cm.data.unwrap_or_default()[ascend::DATA_KEY]).expect("json");
    assert_eq!(
        cfg["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Fault"],
        "[]"
    );
    // NPU nodes carry the resource, and pods asking for it are placed.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.client());
    let n = nodes.get("node-0000").await.expect("node");
    let cap = n.status.and_then(|s| s.capacity).unwrap_or_default();
    assert_eq!(cap.get(ascend::RESOURCE).map(|q| q.0.as_str()), Some("8"));
    c.shutdown().await;
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

/// 200 nodes, 2,000 pods: everything Running in bounded time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_200_nodes_2000_pods() {
    let _watchdog = crate::watchdog::start();
    let t0 = Instant::now();
    let c = SimCluster::start(SimConfig {
        nodes: 200,
        gpus_per_node: 8,
        gpus_per_pod: 0,
        namespaces: vec![NS.into()],
        ..SimConfig::default()
    })
    .await
    .expect("start");
    let setup = t0.elapsed();
    let t1 = Instant::now();
    for i in 0..200 {
        c.create_pytorchjob(
            NS,
            &format!("job-{i:03}"),
            9,
            &[("kcover.io/cascading-recovery", "true")],
        )
        .await
        .expect("create job");
    }
    let pods = c
        .wait_for_pods_running(NS, kf::JOB_NAME_LABEL, 2000, Duration::from_secs(180))
        .await
        .expect("2,000 pods running");
    let took = t1.elapsed();
    println!("smoke: setup of 200 nodes {setup:?}; 2,000 pods Running {took:?}");
    assert_eq!(pods.len(), 2000);
    let names: HashSet<String> = pods.iter().map(|p| p.name_any()).collect();
    assert_eq!(names.len(), 2000, "no duplicates");
    let mut per_node: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for p in &pods {
        *per_node
            .entry(
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert_eq!(per_node.len(), 200, "every node used");
    assert!(
        per_node.values().all(|n| *n <= 20),
        "spread: {:?}",
        per_node.values().max()
    );
    assert_eq!(c.api().object_count("/pods"), 2000, "no extra pods");
    c.shutdown().await;
}

async fn bulk_run(nodes: usize, jobs: usize, limit: Duration) {
    let t0 = Instant::now();
    let c = SimCluster::start(SimConfig {
        nodes,
        gpus_per_node: 8,
        namespaces: vec![NS.into()],
        ..SimConfig::default()
    })
    .await
    .expect("start");
    let opts = JobOptions::labels(&[("kcover.io/cascading-recovery", "true")]);
    let names = c
        .bulk_pytorchjobs(NS, "bulk", jobs, 9, &opts)
        .expect("bulk jobs");
    let setup = t0.elapsed();
    let pods = c
        .wait_for_pods_running(NS, kf::JOB_NAME_LABEL, jobs * 10, limit)
        .await
        .expect("all pods running");
    println!(
        "bulk: {nodes} nodes and {} pods created in {setup:?}; all Running after {:?}",
        jobs * 10,
        t0.elapsed()
    );
    assert_eq!(names.len(), jobs);
    assert_eq!(pods.len(), jobs * 10);
    assert_eq!(
        c.api().object_count("/pods"),
        jobs * 10,
        "the operator adopted, made no extra pods"
    );
    let nodes_used: HashSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes_used.len(), nodes.min(jobs * 10));
    // The operator owns the pods: deleting one brings it back.
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    api.delete("bulk-0-worker-3", &DeleteParams::default())
        .await
        .expect("delete");
    let again = wait_for(T * 3, "recreated", || async {
        Ok(pod(&c, "bulk-0-worker-3").await.filter(pod_running))
    })
    .await
    .expect("recreated");
    assert_eq!(
        again
            .labels()
            .get(kf::REPLICA_INDEX_LABEL)
            .map(String::as_str),
        Some("3")
    );
    c.shutdown().await;
}

/// The bulk setup path: 200 nodes and 2,000 pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_setup_200_nodes_2000_pods() {
    let _watchdog = crate::watchdog::start();
    bulk_run(200, 200, Duration::from_secs(180)).await;
}

/// The design's scale, 2,000 nodes and 20,000 pods (slow in debug builds:
/// run with `--ignored`, preferably `--release`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale: 2,000 nodes and 20,000 pods take minutes in a debug build; the same path runs at 200 nodes in CI"]
async fn bulk_setup_2000_nodes_20000_pods() {
    let _watchdog = crate::watchdog::start();
    bulk_run(2000, 2000, Duration::from_secs(600)).await;
}

fn ready_condition(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

#[tokio::test]
async fn a_node_going_not_ready_marks_its_pods_not_ready() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(1).await;
    c.create_pytorchjob(NS, "nr", 1, &[]).await.expect("create");
    let sel = format!("{}=nr", kf::JOB_NAME_LABEL);
    c.wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    c.set_node_ready("node-0000", false)
        .await
        .expect("not ready");
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    let pods = wait_for(T, "pods not ready", || {
        let api = api.clone();
        let sel = sel.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(&sel)).await?.items;
            let all = pods.len() == 2
                && pods
                    .iter()
                    .all(|p| ready_condition(p).as_deref() == Some("False"));
            Ok(all.then_some(pods))
        }
    })
    .await
    .expect("marked not ready");
    assert!(
        pods.iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn kubelets_finish_graceful_deletions() {
    let _watchdog = crate::watchdog::start();
    let c = SimCluster::start(SimConfig {
        nodes: 2,
        namespaces: vec![NS.into()],
        hold_pod_deletion: true,
        ..SimConfig::default()
    })
    .await
    .expect("start");
    c.create_pytorchjob(NS, "gd", 1, &[]).await.expect("create");
    let sel = format!("{}=gd", kf::JOB_NAME_LABEL);
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    let old = pods
        .iter()
        .find(|p| p.name_any() == "gd-worker-0")
        .and_then(|p| p.uid())
        .expect("uid");
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    api.delete("gd-worker-0", &DeleteParams::default())
        .await
        .expect("delete");
    let fresh = wait_for(T, "pod replaced", || async {
        Ok(pod(&c, "gd-worker-0")
            .await
            .filter(|p| p.uid().as_deref() != Some(old.as_str()) && pod_running(p)))
    })
    .await
    .expect("the kubelet finished the deletion and the operator recreated the pod");
    assert!(fresh.metadata.deletion_timestamp.is_none());
    c.shutdown().await;
}

#[tokio::test]
async fn volcano_pods_deleted_without_a_command_are_recreated() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(2).await;
    c.create_volcano_job(NS, "vd", 2, &[])
        .await
        .expect("create vcjob");
    let sel = format!("{}=vd", vc::JOB_NAME);
    let pods = c
        .wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("running");
    let before = uids(&pods);
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    for p in &pods {
        api.delete(&p.name_any(), &DeleteParams::default())
            .await
            .expect("delete");
    }
    let again = wait_for(T, "2 new running pods", || {
        let api = api.clone();
        let sel = sel.clone();
        let before = before.clone();
        async move {
            let pods = api.list(&ListParams::default().labels(&sel)).await?.items;
            let fresh: Vec<Pod> = pods
                .into_iter()
                .filter(|p| pod_running(p) && !before.contains(&p.uid().unwrap_or_default()))
                .collect();
            Ok((fresh.len() == 2).then_some(fresh))
        }
    })
    .await
    .expect("recreated by the default SyncJob action");
    // Same names and version: a sync, not a restart.
    for p in &again {
        assert_eq!(
            p.annotations().get(vc::JOB_VERSION).map(String::as_str),
            Some("0")
        );
    }
    let names: BTreeSet<String> = again.iter().map(|p| p.name_any()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["vd-worker-0".to_owned(), "vd-worker-1".to_owned()])
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

/// The bulk set-up of `rebound sim` goes on when a pod it writes exists
/// already (the simulated operator saw the job first and made the pod
/// itself): 409 AlreadyExists is the pod it wanted. Before, the set-up
/// failed in about one run in four at 20,000 pods.
#[tokio::test]
async fn bulk_setup_accepts_pods_that_exist_already() {
    let _watchdog = crate::watchdog::start();
    let c = cluster(2).await;
    let api: Api<Pod> = Api::namespaced(c.client(), NS);
    for name in ["race-0-master-0", "race-0-worker-1"] {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "pytorch", "image": "x"}]},
        }))
        .expect("pod");
        api.create(&PostParams::default(), &p)
            .await
            .expect("pre-existing pod");
    }
    let names = c
        .bulk_pytorchjobs(NS, "race", 1, 2, &JobOptions::default())
        .expect("the set-up goes on past AlreadyExists");
    assert_eq!(names, ["race-0"]);
    assert!(
        pod(&c, "race-0-worker-0").await.is_some(),
        "the pods that did not exist were written"
    );
    c.shutdown().await;
}
