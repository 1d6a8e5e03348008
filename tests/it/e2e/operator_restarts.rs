//! Restarts the job's own operator survives (issue 32): a TrainJob and a
//! JobSet whose child Jobs allow failures are restarted three times and
//! live (rebound restarts them through their child Jobs, which JobSet
//! makes anew: nothing counts against `backoffLimit` or `maxRestarts`),
//! and an exit the operator treats as final is not restarted, the
//! decision saying why. On the real server these are the real Trainer,
//! JobSet, Job controller and training-operator.

use super::*;
use kube::api::PostParams;
use rebound_sim::actors::trainer;
use serde_json::{Value, json};

/// Restarts at once, as often as faults come.
pub(super) const NO_COOLDOWN: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: at-once, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
"#;

/// A child Job as users write them: failures allowed (the Job
/// controller's default `backoffLimit`, 6), containers restarted by the
/// kubelet (`OnFailure`), `nodes` pods.
fn child_job(bed: &Testbed, container: &str, nodes: u32, labels: &Value) -> Value {
    let sh = bed.cluster.config().shared.clone().unwrap_or_default();
    let mut pod = json!({
        "metadata": {"labels": labels},
        "spec": {"restartPolicy": "OnFailure",
                 "containers": [{"name": container, "image": "registry.local/rebound-sim/trainer:latest"}]},
    });
    if bed.is_shared() {
        pod["spec"]["schedulerName"] = json!(sh.scheduler_name);
        pod["spec"]["tolerations"] = json!([{"key": sh.taint_key, "operator": "Exists"}]);
    }
    json!({"parallelism": nodes, "completions": nodes, "completionMode": "Indexed",
           "backoffLimit": 6, "template": pod})
}

async fn create(bed: &Testbed, ns: &str, res: &kube::api::ApiResource, obj: Value) {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    let api = Api::<DynamicObject>::namespaced_with(bed.client(), ns, res);
    // The real Trainer's webhook reads TrainingRuntimes from its cache: a
    // runtime created a moment ago may not be there yet ("must be created
    // before the TrainJob"); asked again until it is.
    wait(&format!("{} created", res.kind), T, || async {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => Some(Ok(())),
            Err(kube::Error::Api(e))
                if e.code == 403 && e.message.contains("must be created before") =>
            {
                None
            }
            Err(e) => Some(Err(e.to_string())),
        }
    })
    .await
    .expect("create");
}

/// Fails one container of the job's running pods `times` times, each
/// after the previous restart brought every pod back as a new pod, and
/// checks the job lives: `nodes` pods running after each, none failed by
/// its operator, the restart recorded on `record_on`.
async fn survives_restarts(
    bed: &Testbed,
    ns: &str,
    selector: &str,
    container: &str,
    nodes: usize,
    times: u64,
    record_on: (&kube::api::ApiResource, &str),
) {
    let (res, name) = record_on;
    let api = Api::<DynamicObject>::namespaced_with(bed.client(), ns, res);
    let mut pods = wait("the job's pods running", T, || async {
        let p = running(bed, ns, selector).await;
        (p.len() >= nodes).then_some(p)
    })
    .await;
    for n in 1..=times {
        let before: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let victim = pods[0].metadata.name.clone().expect("name");
        bed.cluster
            .fail_container(ns, &victim, container, 1, "Error")
            .await
            .expect("fail a container");
        pods = wait(
            &format!("restart {n}: every pod new and running"),
            3 * T,
            || async {
                let p = running(bed, ns, selector).await;
                let fresh = p
                    .iter()
                    .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| !before.contains(u)))
                    .count();
                (fresh >= nodes).then_some(p)
            },
        )
        .await;
        // The record is written beside the restart, and may land after
        // the operator made the pods anew.
        let job = wait(&format!("restart {n} recorded on {name}"), T, || async {
            let job = api.get(name).await.expect("the job");
            let count = job
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("rebound.dev/restart-count"))
                .and_then(|v| v.parse::<u64>().ok());
            assert!(
                count.is_none_or(|c| c <= n),
                "{name}: {count:?} restarts for {n} faults"
            );
            (count == Some(n)).then_some(job)
        })
        .await;
        let failed = job.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Failed" && c["status"] == "True")
            .cloned();
        assert_eq!(
            failed, None,
            "{name} failed by its operator after restart {n}"
        );
        // Followed to its end: each restart ends in JobResumed.
        wait(&format!("restart {n}: JobResumed"), T, || async {
            let (resumed, not) = ends(bed, ns, name).await;
            assert!(not.is_empty(), "{name}: {not:?}");
            (resumed.len() as u64 >= n).then_some(())
        })
        .await;
    }
}

async fn a_trainjob_whose_child_job_allows_failures_survives_three_restarts(server: Server) {
    let (bed, ctl) = bed_with(server, 8, NO_COOLDOWN, None).await;
    let ml = bed.ns("ml");
    let labels = json!({OPT_IN.0: OPT_IN.1, trainer::ANCESTOR_LABEL: trainer::ANCESTOR_TRAINER});
    let rt = json!({
        "apiVersion": trainer::API_VERSION, "kind": "TrainingRuntime",
        "metadata": {"name": "survive", "namespace": ml},
        "spec": {"mlPolicy": {"numNodes": 1},
                 "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                     "metadata": {"labels": labels},
                     "spec": child_job(&bed, trainer::NODE_CONTAINER, 1, &json!({OPT_IN.0: OPT_IN.1}))}}]}}},
    });
    create(&bed, &ml, &trainer::runtime_resource(false), rt).await;
    let tj = json!({
        "apiVersion": trainer::API_VERSION, "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": ml, "labels": {OPT_IN.0: OPT_IN.1}},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": "survive"},
                 "labels": {OPT_IN.0: OPT_IN.1},
                 "trainer": {"numNodes": 8}},
    });
    create(&bed, &ml, &trainer::trainjob_resource(), tj).await;
    survives_restarts(
        &bed,
        &ml,
        "jobset.sigs.k8s.io/jobset-name=tj",
        trainer::NODE_CONTAINER,
        8,
        3,
        (&trainer::trainjob_resource(), "tj"),
    )
    .await;
    // Each restart went through the child Job (a delete of the Job by the
    // controller), never by its pods alone.
    let job_deletes = requests(&bed, "delete", "jobs", "");
    assert!(job_deletes.len() >= 3, "{job_deletes:?}");
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn a_jobset_whose_child_job_allows_failures_survives_three_restarts(server: Server) {
    let (bed, ctl) = bed_with(server, 8, NO_COOLDOWN, None).await;
    let ml = bed.ns("ml");
    let labels = json!({OPT_IN.0: OPT_IN.1});
    let js = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "namespace": ml, "labels": labels},
        // No maxRestarts: a JobSet restart of its own would fail it.
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
            "metadata": {"labels": labels},
            "spec": child_job(&bed, "worker", 8, &labels)}}]},
    });
    create(&bed, &ml, &rebound_sim::actors::jobset::api_resource(), js).await;
    survives_restarts(
        &bed,
        &ml,
        "jobset.sigs.k8s.io/jobset-name=js",
        "worker",
        8,
        3,
        (&rebound_sim::actors::jobset::api_resource(), "js"),
    )
    .await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn an_exit_its_operator_treats_as_final_is_not_restarted(server: Server) {
    let (bed, ctl) = bed_with(server, 4, NO_COOLDOWN, None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    let opts = rebound_sim::cluster::JobOptions::labels(&[OPT_IN]).restart_policy("ExitCode");
    c.create_pytorchjob_with(&ml, "final", 1, &opts)
        .await
        .expect("create");
    c.create_pytorchjob_with(&ml, "retried", 1, &opts)
        .await
        .expect("create");
    for job in ["final", "retried"] {
        let sel = format!("{PT}={job}");
        wait(&format!("{job} running"), T, || async {
            (running(&bed, &ml, &sel).await.len() >= 2).then_some(())
        })
        .await;
    }
    // Exit 1 under ExitCode: a permanent error, the training-operator
    // fails the job itself.
    c.fail_container(&ml, "final-worker-0", "pytorch", 1, "Error")
        .await
        .expect("fail");
    let skipped = wait("the FinalExit decision said", T, || async {
        let n: Vec<String> = events_with_reason(&bed, &ml, "RestartSkipped")
            .await
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("final"))
            .filter_map(|e| e.note)
            .filter(|n| n.starts_with("FinalExit"))
            .collect();
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert!(
        skipped[0].contains("exit code 1") && skipped[0].contains("ExitCode"),
        "{skipped:?}"
    );
    // Exit 137 under ExitCode is retried by its operator, and restarted:
    // the positive control that decisions were made after the first.
    c.fail_container(&ml, "retried-worker-0", "pytorch", 137, "Error")
        .await
        .expect("fail");
    wait("the retried job restarted", T, || async {
        (restart_count(&bed, &ml, "retried").await == 1).then_some(())
    })
    .await;
    let (resumed, _) = wait("the retried job resumed", T, || async {
        let e = ends(&bed, &ml, "retried").await;
        (!e.0.is_empty() || !e.1.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(resumed.len(), 1, "JobResumed, not JobNotResumed");
    assert_eq!(
        restart_count(&bed, &ml, "final").await,
        0,
        "a final exit restarted"
    );
    assert_eq!(restarts_in(&bed, &ml, PT, "final"), 0);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

e2e!(a_trainjob_whose_child_job_allows_failures_survives_three_restarts);
e2e!(a_jobset_whose_child_job_allows_failures_survives_three_restarts);
e2e!(an_exit_its_operator_treats_as_final_is_not_restarted);
