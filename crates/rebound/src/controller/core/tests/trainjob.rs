//! Kubeflow Trainer v2: a TrainJob runs as a JobSet of its name that it
//! owns. Its pods are the TrainJob's (policies select the TrainJob, the
//! record is written on it) and a restart deletes them through the JobSet,
//! whichever of the pods, the JobSet and the TrainJob the core saw first.

use super::super::effect::EffectKind;
use super::super::input::{Change, Input};
use super::bed::Bed;
use super::model::{self, NS, OPT_IN};
use crate::api::WorkloadKind;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

const TJ_UID: &str = "trainjob-uid-1";

fn trainjob_resource() -> ApiResource {
    ApiResource {
        group: "trainer.kubeflow.org".into(),
        version: "v1alpha1".into(),
        api_version: "trainer.kubeflow.org/v1alpha1".into(),
        kind: "TrainJob".into(),
        plural: "trainjobs".into(),
    }
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

/// The model's JobSet `name`, owned by the TrainJob of its name (or not),
/// without the opt-in label: only the TrainJob's labels can select it.
fn jobset(b: &Bed, name: &str, owned: bool) -> DynamicObject {
    let mut v = b.m.jobs[name].clone();
    v["metadata"]["labels"] = json!({});
    if owned {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob", "name": name, "uid": TJ_UID, "controller": true}]);
    }
    object(v)
}

/// A core that knows TrainJobs, with TrainJob `j0` (opted in) and its
/// JobSet; `jobset_first`: the JobSet's owner is seen before the
/// TrainJob's watch syncs.
fn bed(jobset_first: bool) -> Bed {
    let mut b = Bed::new(None);
    let tj = object(
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "j0", "namespace": NS, "uid": TJ_UID, "resourceVersion": "1",
            "labels": {OPT_IN: "true"}, "annotations": {}},
        "spec": {"runtimeRef": {"name": "torch"}}}),
    );
    let js = jobset(&b, "j0", true);
    let mut ins = vec![Input::JobKinds(vec![
        (WorkloadKind::JobSet, model::jobset_resource()),
        (WorkloadKind::TrainJob, trainjob_resource()),
    ])];
    let owner = Input::Job(WorkloadKind::JobSet, Change::Apply(js));
    if jobset_first {
        ins.push(owner);
    }
    ins.extend([
        Input::Job(WorkloadKind::TrainJob, Change::Relist),
        Input::Job(WorkloadKind::TrainJob, Change::Apply(tj)),
        Input::Job(WorkloadKind::TrainJob, Change::Synced),
    ]);
    if !jobset_first {
        ins.push(Input::Job(
            WorkloadKind::JobSet,
            Change::Apply(jobset(&b, "j0", true)),
        ));
    }
    b.feed(ins);
    assert!(b.core.ready());
    b
}

/// A restart's job: kind, name, uid.
type Restart = (WorkloadKind, String, Option<String>);

/// The job kinds and names of the restarts and records emitted so far.
fn acted(b: &Bed) -> (Vec<Restart>, Vec<WorkloadKind>) {
    let mut restarts = Vec::new();
    let mut records = Vec::new();
    for e in &b.log {
        match &e.kind {
            EffectKind::RestartJob { job, how, .. } => {
                restarts.push((job.kind, job.name.clone(), job.uid.clone()));
                assert!(
                    format!("{how:?}").contains("jobset.sigs.k8s.io/jobset-name=j0"),
                    "{how:?}"
                );
            }
            EffectKind::Record { job, .. } => records.push(job.kind),
            _ => {}
        }
    }
    (restarts, records)
}

#[test]
fn a_trainjob_is_restarted_through_its_jobset_and_recorded_on_itself() {
    for jobset_first in [true, false] {
        let mut b = bed(jobset_first);
        let js_uid = b.m.jobs["j0"]["metadata"]["uid"]
            .as_str()
            .expect("uid")
            .to_string();
        let i = b.pod_index("j0");
        b.m.fail_pod(i);
        b.pump();
        let (restarts, records) = acted(&b);
        assert_eq!(
            restarts,
            [(WorkloadKind::JobSet, "j0".to_string(), Some(js_uid))],
            "jobset first: {jobset_first}"
        );
        assert_eq!(records, [WorkloadKind::TrainJob]);
    }
}

#[test]
fn a_jobset_that_no_longer_names_its_trainjob_has_its_pods_back() {
    let mut b = bed(true);
    // The JobSet loses its owner: its pods are its own again, and a fault
    // restarts and records the JobSet.
    let js = jobset(&b, "j0", false);
    b.feed(vec![Input::Job(WorkloadKind::JobSet, Change::Apply(js))]);
    let i = b.pod_index("j0");
    b.m.fail_pod(i);
    b.pump();
    let (restarts, records) = acted(&b);
    assert_eq!(restarts.len(), 1);
    assert_eq!(records, [WorkloadKind::JobSet]);
    // The owner comes back: the pods are the TrainJob's again, whose
    // record (not the JobSet's) the next restart writes.
    let js = jobset(&b, "j0", true);
    b.feed(vec![Input::Job(WorkloadKind::JobSet, Change::Apply(js))]);
    let pods: Vec<_> = b
        .core
        .store
        .job_pods(&(NS.into(), "TrainJob".into(), "j0".into()))
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    assert_eq!(pods.len(), b.pods_of("j0").len(), "{pods:?}");
    assert!(
        b.core
            .store
            .job_pods(&(NS.into(), "JobSet".into(), "j0".into()))
            .is_empty()
    );
}
