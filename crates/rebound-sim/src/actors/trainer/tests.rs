//! Tests of the TrainJob controller: the JobSet it builds, its status,
//! runtime references.

use super::*;
use serde_json::Value;

fn tj(spec: Value) -> DynamicObject {
    let mut o = DynamicObject::new("llm", &trainjob_resource()).within("ml");
    o.metadata.uid = Some("u-1".into());
    o.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    o.data = json!({"spec": spec});
    o
}

fn runtime() -> Value {
    let rj = |name: &str, step: &str, container: &str| {
        json!({"name": name, "template": {"metadata": {"labels": {ANCESTOR_LABEL: step}},
            "spec": {"template": {"metadata": {"labels": {"rt": "pod"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": container, "image": "rt-image"}]}}}}})
    };
    json!({"spec": {"mlPolicy": {"numNodes": 3}, "template": {
    "metadata": {"labels": {"from-runtime": "yes"}},
    "spec": {"replicatedJobs": [
        rj("dataset-initializer", "dataset-initializer", "dataset-initializer"),
        rj("node", ANCESTOR_TRAINER, NODE_CONTAINER),
    ]}}}})
}

#[test]
fn a_trainjob_becomes_a_jobset_of_its_name_owned_by_it() {
    let t = tj(
        json!({"runtimeRef": {"name": "torch"}, "labels": {"kcover.io/cascading-recovery": "true"},
        "trainer": {"numNodes": 4, "image": "train:1", "command": ["torchrun"], "env": [{"name": "A", "value": "1"}]}}),
    );
    let js = build_jobset(&t, &runtime());
    assert_eq!(js["metadata"]["name"], "llm");
    assert_eq!(js["metadata"]["namespace"], "ml");
    let owner = &js["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "TrainJob");
    assert_eq!(owner["apiVersion"], API_VERSION);
    assert_eq!(owner["uid"], "u-1");
    assert_eq!(owner["controller"], true);
    let labels = &js["metadata"]["labels"];
    assert_eq!(labels["from-runtime"], "yes");
    assert_eq!(labels["kcover.io/cascading-recovery"], "true");
    assert!(labels["team"].is_null(), "metadata.labels are not copied");
    let node = &js["spec"]["replicatedJobs"][1];
    assert_eq!(node["replicas"], 1);
    assert_eq!(node["template"]["spec"]["parallelism"], 4);
    assert_eq!(node["template"]["spec"]["completions"], 4);
    assert_eq!(
        node["template"]["metadata"]["labels"]["kcover.io/cascading-recovery"],
        "true"
    );
    let c = &node["template"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "train:1");
    assert_eq!(c["command"], json!(["torchrun"]));
    assert_eq!(c["env"], json!([{"name": "A", "value": "1"}]));
    assert_eq!(
        node["template"]["spec"]["template"]["metadata"]["labels"]["rt"], "pod",
        "pods carry the runtime's pod labels"
    );
    let init = &js["spec"]["replicatedJobs"][0];
    assert!(
        init["template"]["spec"]["parallelism"].is_null(),
        "initializer untouched"
    );
    assert_eq!(
        init["template"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "rt-image"
    );
    // numNodes from the runtime's ML policy when the TrainJob has none.
    let js = build_jobset(&tj(json!({"runtimeRef": {"name": "torch"}})), &runtime());
    assert_eq!(
        js["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"],
        3
    );
}

#[test]
fn status_follows_the_jobset() {
    let t = tj(json!({"runtimeRef": {"name": "torch"}}));
    let s = plan_status(&t, None, Some("ClusterTrainingRuntime torch not found")).expect("status");
    assert_eq!(s["conditions"][0]["type"], "Created");
    assert_eq!(s["conditions"][0]["status"], "False");
    assert_eq!(s["conditions"][0]["reason"], "JobsBuildFailed");
    let mut js = DynamicObject::new("llm", &jobset::api_resource()).within("ml");
    js.data = json!({"status": {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "done"}],
        "replicatedJobsStatus": [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0, "active": 0, "suspended": 0}]}});
    let s = plan_status(&t, Some(&js), None).expect("status");
    let types: Vec<&str> = s["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["Created", "Complete"]);
    assert_eq!(s["jobsStatus"][0]["succeeded"], 1);
    let mut done = t.clone();
    done.data["status"] = s;
    assert_eq!(
        plan_status(&done, Some(&js), None),
        None,
        "no change, no write"
    );
}

#[test]
fn runtime_refs_default_to_the_cluster_kind() {
    assert_eq!(
        runtime_ref(&tj(json!({"runtimeRef": {"name": "a"}}))),
        (true, "a".into())
    );
    assert_eq!(
        runtime_ref(&tj(
            json!({"runtimeRef": {"name": "b", "kind": "TrainingRuntime"}})
        )),
        (false, "b".into())
    );
}
