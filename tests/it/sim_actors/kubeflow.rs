//! The simulated Kubeflow training operator: PyTorchJob pods created,
//! scheduled, run and recreated, and the restart policies `Never` and
//! `OnFailure`.

use super::*;

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
