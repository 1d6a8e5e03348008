//! Tests of the JobSet controller's planning: child Jobs and restarts.

use super::plan::finished;
use super::*;

fn js(max_restarts: i64, restarts: i64) -> DynamicObject {
    let mut o = DynamicObject::new("js", &api_resource()).within("ns");
    o.metadata.uid = Some("u".into());
    o.data = json!({
        "spec": {"failurePolicy": {"maxRestarts": max_restarts}, "replicatedJobs": [{
            "name": "workers", "replicas": 2,
            "template": {"spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}}]},
        "status": {"restarts": restarts},
    });
    o
}

fn child(name: &str, attempt: i64, failed: bool) -> ChildJob {
    ChildJob {
        name: name.into(),
        attempt,
        failed,
        ..Default::default()
    }
}

#[test]
fn creates_labelled_child_jobs() {
    let p = plan(&js(1, 0), &[], &InFlight::default());
    assert_eq!(p.creates.len(), 2);
    let j = &p.creates[1];
    assert_eq!(j["metadata"]["name"], "js-workers-1");
    assert_eq!(j["metadata"]["labels"][JOB_INDEX], "1");
    assert_eq!(
        j["spec"]["template"]["metadata"]["labels"][RESTART_ATTEMPT],
        "0"
    );
    assert_eq!(
        j["spec"]["template"]["metadata"]["labels"][JOBSET_NAME],
        "js"
    );
    assert_eq!(j["spec"]["template"]["spec"]["subdomain"], "js");
}

#[test]
fn a_failed_child_restarts_the_set_until_max_restarts() {
    let a = child("js-workers-0", 0, true);
    let b = child("js-workers-1", 0, false);
    let p = plan(&js(1, 0), &[&a, &b], &InFlight::default());
    assert_eq!(
        p.status.as_ref().map(|s| s["restarts"].clone()),
        Some(json!(1))
    );
    assert_eq!(p.deletes.len(), 2, "all jobs of the old attempt go");
    let a = child("js-workers-0", 1, true);
    let p = plan(&js(1, 1), &[&a], &InFlight::default());
    assert!(finished(&p.status.expect("status")));
}
