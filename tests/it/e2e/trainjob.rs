//! Kubeflow Trainer v2: a TrainJob is selected, restarted and recorded as
//! the job, its restart goes through the JobSet of its name.

use super::*;
use kube::ResourceExt;
use kube::api::DynamicObject;
use rebound_sim::actors::{jobset, trainer};

async fn a_trainjob_is_restarted_through_its_jobset_and_recorded_on_itself(server: Server) {
    let (bed, ctl) = bed_with(server, 3, "", None).await;
    let ml = bed.ns("ml");
    bed.cluster
        .create_trainjob(&ml, "tj", 2, &[OPT_IN])
        .await
        .unwrap();
    let sel = "jobset.sigs.k8s.io/jobset-name=tj";
    wait("the TrainJob's pods running", T, || async {
        (running(&bed, &ml, sel).await.len() >= 2).then_some(())
    })
    .await;
    let js = Api::<DynamicObject>::namespaced_with(bed.client(), &ml, &jobset::api_resource())
        .get("tj")
        .await
        .unwrap();
    let js_uid = js.metadata.uid.clone().unwrap();
    let pod = running(&bed, &ml, sel).await[0].clone();
    let before = pod.metadata.uid.clone().unwrap();
    let cname = pod.spec.as_ref().unwrap().containers[0].name.clone();
    bed.cluster
        .fail_container(
            &ml,
            pod.metadata.name.as_deref().unwrap(),
            &cname,
            1,
            "Error",
        )
        .await
        .unwrap();
    // The record is the TrainJob's.
    let tj = wait("restart recorded on the TrainJob", T, || async {
        let tj =
            Api::<DynamicObject>::namespaced_with(bed.client(), &ml, &trainer::trainjob_resource())
                .get("tj")
                .await
                .ok()?;
        (tj.annotations()
            .get("rebound.dev/restart-count")
            .map(String::as_str)
            == Some("1"))
        .then_some(tj)
    })
    .await;
    assert!(tj.annotations().contains_key("rebound.dev/restart-history"));
    // One deletecollection through the JobSet: its name and uid (sent
    // beside the record; the log has a request once it is answered).
    let through_jobset =
        format!("jobset.sigs.k8s.io/jobset-name=tj,jobset.sigs.k8s.io/jobset-uid={js_uid}");
    wait("the restart through the JobSet", T, || async {
        (!requests(&bed, "deletecollection", "pods", &through_jobset).is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        requests(&bed, "patch", "jobsets", "").len(),
        0,
        "nothing is written on the JobSet"
    );
    // The Event is about the TrainJob.
    let ev = wait("JobRestarted Event on the TrainJob", T, || async {
        let e = events_with_reason(&bed, &ml, "JobRestarted").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    let regarding = ev[0].regarding.clone().unwrap_or_default();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("TrainJob"), Some("tj"))
    );
    // The way back: the job trains again with new pods.
    wait("the TrainJob's pods running again", T, || async {
        let pods = running(&bed, &ml, sel).await;
        (pods.len() >= 2
            && pods
                .iter()
                .all(|p| p.metadata.uid.as_deref() != Some(&before)))
        .then_some(())
    })
    .await;
    assert_eq!(
        requests(&bed, "deletecollection", "pods", "jobset-name=tj").len(),
        1,
        "restarted once"
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

e2e!(a_trainjob_is_restarted_through_its_jobset_and_recorded_on_itself);
