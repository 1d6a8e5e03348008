//! The simulated Kubeflow Trainer v2 controller: a TrainJob becomes a
//! JobSet of its name, owned by it, which the simulated JobSet operator
//! runs; TrainJobs and runtimes pass the real Trainer CRDs; an injected
//! runtime's agent reaches the pods with a job name its label resolves.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use rebound::inplace::inject::{InjectOptions, inject_document};
use rebound::inplace::{AGENT_CONTAINER, inject};
use rebound_sim::actors::{jobset as js, trainer};
use rebound_sim::cluster::{SimCluster, SimConfig, wait_for};
use serde_json::{Value, json};

const NS: &str = "ml";
const T: Duration = Duration::from_secs(30);

async fn cluster() -> SimCluster {
    SimCluster::start(SimConfig {
        nodes: 4,
        namespaces: vec![NS.into()],
        ..SimConfig::default()
    })
    .await
    .expect("start sim cluster")
}

fn condition(o: &DynamicObject, t: &str) -> Option<String> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .and_then(|c| c["status"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn a_trainjob_runs_as_a_jobset_of_its_name_owned_by_it() {
    let _watchdog = crate::watchdog::start();
    let c = cluster().await;
    let tj = c
        .create_trainjob(NS, "llm", 3, &[("kcover.io/cascading-recovery", "true")])
        .await
        .expect("create trainjob");
    let sel = format!("{}=llm", js::JOBSET_NAME);
    let pods = c
        .wait_for_pods_running(NS, &sel, 3, T)
        .await
        .expect("3 training nodes running");
    let sets: Api<DynamicObject> = Api::namespaced_with(c.client(), NS, &js::api_resource());
    let set = sets
        .get("llm")
        .await
        .expect("jobset of the trainjob's name");
    let owner = &set.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("TrainJob", Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), tj.uid());
    assert_eq!(
        set.labels()
            .get("kcover.io/cascading-recovery")
            .map(String::as_str),
        Some("true"),
        "spec.labels reach the JobSet"
    );
    assert_eq!(
        set.data["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"],
        3
    );
    for p in &pods {
        let l = p.labels();
        assert_eq!(
            l.get(trainer::ANCESTOR_LABEL).map(String::as_str),
            None,
            "Job labels are not pod labels"
        );
        assert_eq!(
            l.get("kcover.io/cascading-recovery").map(String::as_str),
            Some("true"),
            "the runtime's pod template labels reach the pods"
        );
        assert_eq!(
            l.get(js::REPLICATED_JOB_NAME).map(String::as_str),
            Some("node")
        );
    }
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &trainer::trainjob_resource());
    wait_for(T, "TrainJob Created", || async {
        let t = tjs.get("llm").await?;
        Ok((condition(&t, "Created").as_deref() == Some("True")
            && t.data["status"]["jobsStatus"][0]["name"] == "node")
            .then_some(()))
    })
    .await
    .expect("status from the JobSet");
    c.shutdown().await;
}

#[tokio::test]
async fn a_trainjob_waits_for_its_runtime() {
    let _watchdog = crate::watchdog::start();
    let c = cluster().await;
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &trainer::trainjob_resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": trainer::API_VERSION, "kind": "TrainJob",
        "metadata": {"name": "early", "namespace": NS},
        "spec": {"runtimeRef": {"name": "torch-later"}, "trainer": {"numNodes": 2}},
    }))
    .expect("trainjob");
    tjs.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    wait_for(T, "JobsBuildFailed", || async {
        let t = tjs.get("early").await?;
        Ok((condition(&t, "Created").as_deref() == Some("False")).then_some(()))
    })
    .await
    .expect("missing runtime reported");
    // The ClusterTrainingRuntime arrives: the JobSet follows.
    let rts: Api<DynamicObject> = Api::all_with(c.client(), &trainer::runtime_resource(true));
    let rt: DynamicObject = serde_json::from_value(json!({
        "apiVersion": trainer::API_VERSION, "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-later"},
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
            "metadata": {"labels": {trainer::ANCESTOR_LABEL: trainer::ANCESTOR_TRAINER}},
            "spec": {"completionMode": "Indexed", "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "node", "image": "trainer:1"}]}}}}}]}}},
    }))
    .expect("runtime");
    rts.create(&PostParams::default(), &rt)
        .await
        .expect("runtime");
    c.wait_for_pods_running(NS, &format!("{}=early", js::JOBSET_NAME), 2, T)
        .await
        .expect("pods after the runtime exists");
    c.shutdown().await;
}

/// Create an injected TrainingRuntime and a TrainJob of it; the raw JSON
/// of its running pods' agent containers (typed pods of k8s-openapi's
/// `v1_33` would drop `restartPolicyRules`).
async fn wired_trainjob_agents(c: &SimCluster, job: &str) -> Vec<Value> {
    let runtime = format!("{job}-wired");
    let mut rt = json!({
        "apiVersion": trainer::API_VERSION, "kind": "TrainingRuntime",
        "metadata": {"name": runtime, "namespace": NS},
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
            "metadata": {"labels": {trainer::ANCESTOR_LABEL: trainer::ANCESTOR_TRAINER}},
            "spec": {"completionMode": "Indexed", "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "node", "image": "trainer:1"}]}}}}}]}}},
    });
    let report =
        inject_document(&mut rt, &InjectOptions::default(), "runtime").expect("inject runtime");
    assert_eq!(report.templates, 1);
    let rts: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &trainer::runtime_resource(false));
    rts.create(
        &PostParams::default(),
        &serde_json::from_value(rt).expect("runtime"),
    )
    .await
    .expect("runtime accepted");
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &trainer::trainjob_resource());
    let tj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": trainer::API_VERSION, "kind": "TrainJob",
        "metadata": {"name": job, "namespace": NS},
        "spec": {"runtimeRef": {"kind": "TrainingRuntime", "name": runtime}, "trainer": {"numNodes": 2}},
    }))
    .expect("trainjob");
    tjs.create(&PostParams::default(), &tj)
        .await
        .expect("trainjob valid");
    let sel = format!("{}={job}", js::JOBSET_NAME);
    c.wait_for_pods_running(NS, &sel, 2, T)
        .await
        .expect("wired pods");
    let raw: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &ApiResource::erase::<Pod>(&()));
    let pods = raw
        .list(&ListParams::default().labels(&sel))
        .await
        .expect("pods")
        .items;
    assert_eq!(pods.len(), 2);
    let mut agents = Vec::new();
    for p in &pods {
        let agent = p.data["spec"]["initContainers"]
            .as_array()
            .and_then(|i| i.iter().find(|c| c["name"] == AGENT_CONTAINER))
            .expect("agent in the pod")
            .clone();
        assert_eq!(agent["restartPolicy"], "Always");
        let env = |name: &str| {
            agent["env"]
                .as_array()
                .and_then(|a| a.iter().find(|e| e["name"] == name))
                .cloned()
                .unwrap_or_else(|| panic!("env {name}"))
        };
        assert_eq!(
            env("REBOUND_JOB_API")["value"],
            "trainer.kubeflow.org/v1alpha1/trainjobs"
        );
        // The downward API reads metadata.labels['<label>']: on the pod
        // that label names the TrainJob.
        let path = env("REBOUND_JOB_NAME")["valueFrom"]["fieldRef"]["fieldPath"]
            .as_str()
            .map(str::to_owned)
            .expect("a field path");
        let label = path
            .strip_prefix("metadata.labels['")
            .and_then(|s| s.strip_suffix("']"))
            .expect("a label path");
        assert_eq!(label, inject::JOBSET_NAME_LABEL);
        assert_eq!(p.labels().get(label).map(String::as_str), Some(job));
        agents.push(agent);
    }
    agents
}

/// An injected runtime gives every training pod of its TrainJobs the
/// agent, whose job-name label resolves to the TrainJob, and the
/// TrainJob's JobSet carries the agent's rule.
///
/// Not asserted on the pods: the simulated JobSet and batch Job operators
/// build Jobs and Pods through k8s-openapi's `v1_33` types, which have no
/// `restartPolicyRules`, so the rule is lost between the JobSet and the
/// pods in the simulated cluster (a real JobSet v0.12 and Job controller
/// keep it; tests/it/inject.rs shows the latter on a real control plane).
#[tokio::test]
async fn injected_runtimes_wire_trainjob_pods() {
    let _watchdog = crate::watchdog::start();
    let c = cluster().await;
    let agents = wired_trainjob_agents(&c, "llm").await;
    assert_eq!(agents.len(), 2);
    let sets: Api<DynamicObject> = Api::namespaced_with(c.client(), NS, &js::api_resource());
    let set = sets.get("llm").await.expect("jobset");
    let agent = set.data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["initContainers"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == AGENT_CONTAINER))
        .expect("agent in the JobSet");
    assert_eq!(
        agent["restartPolicyRules"][0]["action"],
        "RestartAllContainers"
    );
    c.shutdown().await;
}

/// The embedded server with the real (a55f03a) Trainer CRDs: the helper's
/// TrainJob and runtime and the controller's status pass them, and the
/// runtime schema, which predates `restartPolicyRules`, prunes the rule
/// as a real server does: the pods get the agent without it.
#[tokio::test]
async fn under_the_real_trainer_crds_the_rule_is_pruned() {
    let _watchdog = crate::watchdog::start();
    // `../shared` beside the project, or two levels up in a git worktree.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let near = root.join("../shared");
    let shared = if near.is_dir() {
        near
    } else {
        root.join("../../shared")
    };
    let dir = shared.join("data/crds/kubeflow-trainer-v2");
    let mut texts = Vec::new();
    for f in [
        "trainer.kubeflow.org_trainjobs.yaml",
        "trainer.kubeflow.org_trainingruntimes.yaml",
    ] {
        match std::fs::read_to_string(dir.join(f)) {
            Ok(t) => texts.push(t),
            Err(e) => {
                eprintln!(
                    "SKIPPED: the shared Trainer CRDs are absent at {}: {e}",
                    dir.display()
                );
                return;
            }
        }
    }
    let c = cluster().await;
    for t in &texts {
        c.api().register_crds_yaml(t).await.expect("real CRD");
    }
    c.create_trainjob(NS, "plain", 1, &[])
        .await
        .expect("valid under the real schema");
    c.wait_for_pods_running(NS, &format!("{}=plain", js::JOBSET_NAME), 1, T)
        .await
        .expect("pods");
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &trainer::trainjob_resource());
    wait_for(T, "status under the real schema", || async {
        let t = tjs.get("plain").await?;
        Ok((condition(&t, "Created").as_deref() == Some("True")).then_some(()))
    })
    .await
    .expect("status accepted");
    assert_eq!(wired_trainjob_agents(&c, "pruned").await.len(), 2);
    // The runtime as stored: the sidecar kept, its rule dropped by the
    // schema (the JobSet made of it has none either).
    let rts: Api<DynamicObject> =
        Api::namespaced_with(c.client(), NS, &trainer::runtime_resource(false));
    let stored = rts.get("pruned-wired").await.expect("runtime");
    let agent = stored.data["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
        ["template"]["spec"]["initContainers"][0]
        .clone();
    assert_eq!(agent["name"], AGENT_CONTAINER);
    assert_eq!(agent["restartPolicy"], "Always");
    assert!(
        agent.get("restartPolicyRules").is_none(),
        "in-place restarts of TrainJobs need a Trainer whose CRDs know restartPolicyRules"
    );
    c.shutdown().await;
}
