//! The store's indices under upserts, moves, removals and relists.

use super::*;
use crate::controller::core::pods::Interner;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
fn the_indices_follow_upserts_moves_and_removals() {
    let mut pool = Interner::default();
    let keys = crate::controller::core::pods::KeySet::default();
    let mut c = Store::default();
    c.upsert_pod(PodInfo::from_pod(&pod("a", "n1", "j"), &keys, &mut pool));
    c.upsert_pod(PodInfo::from_pod(&pod("b", "n1", "j"), &keys, &mut pool));
    assert_eq!(c.pod_count(), 2);
    assert_eq!(c.jobs_on_node("n1", None).len(), 1);
    let jk = job_key(&c.pod("ns", "a").unwrap().job);
    assert_eq!(c.job_pods(&jk).len(), 2);
    // a moves to another node (a new pod of the same name)
    c.upsert_pod(PodInfo::from_pod(&pod("a", "n2", "j"), &keys, &mut pool));
    assert_eq!(c.pods_by_node.get("n1").map(BTreeSet::len), Some(1));
    assert_eq!(c.pods_by_node.get("n2").map(BTreeSet::len), Some(1));
    c.remove_pod("ns", "a");
    c.remove_pod("ns", "b");
    assert_eq!(c.pod_count(), 0);
    assert!(c.pods.is_empty() && c.pods_by_job.is_empty() && c.pods_by_node.is_empty());
    assert!(c.pod("ns", "a").is_none());
}

#[test]
fn a_relist_from_nothing_keeps_no_keys_and_removes_nothing() {
    let mut r = Relists::default();
    r.begin_from_nothing(Watched::Pods);
    assert!(r.is_open(Watched::Pods) && r.any_open());
    r.saw(Watched::Pods, "pod/ns/a");
    assert_eq!(r.end(Watched::Pods), None);
    assert!(!r.any_open());
    // A later relist, with pods held, says which it delivered.
    r.begin(Watched::Pods);
    r.saw(Watched::Pods, "pod/ns/a");
    assert_eq!(
        r.end(Watched::Pods),
        Some(HashSet::from_iter(["pod/ns/a".to_string()]))
    );
}
