//! The other simulated job operators: Volcano (Command restarts, deleted
//! pods recreated), JobSet (child Jobs) and batch Jobs.

use super::*;

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
