//! Pods compacted with shared strings, and the agent wiring read from them.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

fn pod(name: &str, node: &str, job: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([
                ("training.kubeflow.org/job-name".into(), job.into()),
                ("training.kubeflow.org/replica-type".into(), "worker".into()),
                (
                    "training.kubeflow.org/operator-name".into(),
                    "pytorchjob-controller".into(),
                ),
            ])),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn pods_share_their_common_strings_and_the_pool_forgets_what_is_gone() {
    let mut pool = Interner::default();
    let keys = crate::controller::core::pods::KeySet::default();
    let a = PodInfo::from_pod(&pod("a", "n1", "j"), &keys, &mut pool);
    let b = PodInfo::from_pod(&pod("b", "n1", "j"), &keys, &mut pool);
    assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
    assert!(Arc::ptr_eq(
        a.node.as_ref().unwrap(),
        b.node.as_ref().unwrap()
    ));
    assert_eq!(a.labels, b.labels);
    assert_eq!(
        a.labels
            .get("training.kubeflow.org/replica-type")
            .map(|v| &**v),
        Some("worker")
    );
    assert_eq!(a.replica_type.as_deref(), Some("worker"));
    assert!(a.labels.get("missing").is_none());
    assert_eq!(a.labels.to_map().len(), 3);
    assert!(
        Arc::ptr_eq(&a.job, &b.job),
        "one job reference for the job's pods"
    );
    let before = pool.len();
    drop((a, b));
    pool.sweep();
    assert!(pool.len() < before);
    assert!(pool.is_empty(), "nothing holds the strings any more");
}

#[test]
fn a_pod_says_whether_its_agent_came_from_its_template_or_from_admission() {
    use crate::inplace::inject::{InjectOptions, inject_document};
    let mut job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "i"}]}}}});
    inject_document(&mut job, &InjectOptions::default(), "job").expect("inject");
    let mut spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(job["spec"]["template"]["spec"].clone()).expect("spec");
    assert_eq!(agent_exit_code(&spec), Some(87));
    assert_eq!(Wiring::of(&spec), Wiring::Template);
    let agent = spec
        .init_containers
        .iter_mut()
        .flatten()
        .find(|c| c.name == inplace::AGENT_CONTAINER)
        .expect("agent");
    agent
        .env
        .get_or_insert_with(Vec::new)
        .push(k8s_openapi::api::core::v1::EnvVar {
            name: inplace::admission::WIRED_BY_ENV.into(),
            value: Some(inplace::admission::WIRED_BY_ADMISSION.into()),
            ..Default::default()
        });
    assert_eq!(Wiring::of(&spec), Wiring::Admission);
}

#[test]
fn a_tenant_policys_progress_key_is_kept_on_that_tenants_pods_only() {
    let mut pool = Interner::default();
    let mut keys = KeySet::default_only();
    keys.read_in("team-a.example/step", "team-a");
    keys.read_everywhere("ops.example/step");
    let mut with = |ns: &str| {
        let mut p = pod("a", "n1", "j");
        p.metadata.namespace = Some(ns.into());
        p.metadata.annotations = Some(BTreeMap::from([
            ("team-a.example/step".to_string(), "7".to_string()),
            ("ops.example/step".to_string(), "8".to_string()),
            (
                crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION.to_string(),
                "9".to_string(),
            ),
            ("other".to_string(), "x".to_string()),
        ]));
        PodInfo::from_pod(&p, &keys, &mut pool)
    };
    let a = with("team-a");
    assert_eq!(a.progress_value("team-a.example/step"), Some("7"));
    assert_eq!(a.progress_value("ops.example/step"), Some("8"));
    let b = with("team-b");
    assert_eq!(
        b.progress_value("team-a.example/step"),
        None,
        "team a's key is not kept on team b's pods"
    );
    assert_eq!(b.progress_value("ops.example/step"), Some("8"));
    assert_eq!(
        b.progress_value(crate::policy::compile::DEFAULT_PROGRESS_ANNOTATION),
        Some("9")
    );
    assert_eq!(b.progress_value("other"), None);
    // A root policy naming the same key makes it everywhere, whatever the
    // order the policies came in.
    keys.read_everywhere("team-a.example/step");
    keys.read_in("team-a.example/step", "team-c");
    assert!(keys.reads("team-a.example/step", "team-b"));
}
