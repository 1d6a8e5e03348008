//! Pod exits restart each job kind, once, the way the kind needs.

use super::*;

async fn pod_exit_restarts_each_job_kind_in_one_request(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    c.create_pytorchjob(&ml, "pt", 2, &[OPT_IN]).await.unwrap();
    c.create_volcano_job(&ml, "vc", 2, &[OPT_IN]).await.unwrap();
    c.create_jobset(&ml, "js", 1, 2, 3, &[OPT_IN])
        .await
        .unwrap();
    c.create_batch_job(&ml, "bj", 2, &[OPT_IN]).await.unwrap();
    let sels = [
        (PT, "pt", 3usize),
        ("volcano.sh/job-name", "vc", 2),
        ("jobset.sigs.k8s.io/jobset-name", "js", 2),
        ("batch.kubernetes.io/job-name", "bj", 2),
    ];
    for (label, job, n) in sels {
        let sel = format!("{label}={job}");
        wait(&format!("{job} running"), T, || async {
            (running(&bed, &ml, &sel).await.len() >= n).then_some(())
        })
        .await;
    }
    for (label, job, n) in sels {
        let sel = format!("{label}={job}");
        let pod = running(&bed, &ml, &sel).await[0].clone();
        let pname = pod.metadata.name.clone().unwrap();
        let cname = pod.spec.as_ref().unwrap().containers[0].name.clone();
        let before = pod.metadata.uid.clone().unwrap();
        c.fail_container(&ml, &pname, &cname, 1, "Error")
            .await
            .unwrap();
        if bed.is_real() && label == "batch.kubernetes.io/job-name" {
            // The real Job controller counts the deleted pods as failures and
            // recreates them only after its back-off (10 s, doubling per
            // failure), so here the restart is its request and the deletion
            // of every old pod; the embedded run sees the new pods run.
            let old: Vec<String> = running(&bed, &ml, &sel)
                .await
                .iter()
                .filter_map(|p| p.metadata.uid.clone())
                .chain([before.clone()])
                .collect();
            wait(
                &format!("{job} restarted (its pods deleted)"),
                T,
                || async {
                    let pods: Api<Pod> = Api::namespaced(bed.client(), &ml);
                    let left = pods
                        .list(&ListParams::default().labels(&sel))
                        .await
                        .ok()?
                        .items
                        .into_iter()
                        .filter(|p| {
                            p.metadata.deletion_timestamp.is_none()
                                && p.metadata.uid.as_ref().is_some_and(|u| old.contains(u))
                        })
                        .count();
                    (left == 0
                        && !requests(&bed, "deletecollection", "pods", "controller-uid").is_empty())
                    .then_some(())
                },
            )
            .await;
            continue;
        }
        // Every pod runs again, the failed one replaced (a pod that merely
        // stopped running is not a restart).
        wait(
            &format!("{job} restarted (the failed pod replaced)"),
            T,
            || async {
                let pods = running(&bed, &ml, &sel).await;
                (pods.len() >= n
                    && pods
                        .iter()
                        .all(|p| p.metadata.uid.as_deref() != Some(&before)))
                .then_some(())
            },
        )
        .await;
    }
    assert_eq!(job_restarts(&bed, &ml, "pt").await, 1);
    // Each restart followed until its job runs again (the real Job
    // controller's back-off keeps the batch Job's pods away past the wait).
    let jobs: &[&str] = if bed.is_real() {
        &["pt", "vc", "js"]
    } else {
        &["pt", "vc", "js", "bj"]
    };
    for job in jobs {
        let notes = resumed(&bed, &ml, job, 1).await;
        assert!(notes[0].contains("Recreate restart"), "{job}: {notes:?}");
    }
    // One request each: a deletecollection by the job's label, or for
    // Volcano one Command.
    assert_eq!(
        restarts_in(&bed, &ml, "jobset.sigs.k8s.io/jobset-name", "js"),
        1
    );
    // A batch Job's pods are selected by its controller uid.
    let bj = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(bed.client(), &ml)
        .get("bj")
        .await
        .unwrap();
    let uid = bj.metadata.uid.unwrap();
    assert_eq!(
        requests(
            &bed,
            "deletecollection",
            "pods",
            &format!("controller-uid={uid}")
        )
        .len(),
        1,
        "{:#?}",
        bed.requests()
            .iter()
            .filter(|r| by_controller(r) && r.verb.starts_with("delete"))
            .map(|r| format!("{} {} {} {}", r.verb, r.path, urldecode(&r.query), r.status))
            .collect::<Vec<_>>()
    );
    // It lists the pods from the server's cache, no older than the pod
    // watch (no consistent read of the namespace), and the server took it.
    let bounded = requests(
        &bed,
        "deletecollection",
        "pods",
        &format!("controller-uid={uid}"),
    );
    assert!(
        bounded.iter().all(|r| {
            let q = urldecode(&r.query);
            q.contains("resourceVersionMatch=NotOlderThan") && q.contains("resourceVersion=")
        }),
        "{:?}",
        bounded
            .iter()
            .map(|r| urldecode(&r.query))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        restarts_in(&bed, &ml, "volcano.sh/job-name", "vc"),
        0,
        "Volcano restarts through a Command"
    );
    assert_eq!(requests(&bed, "create", "commands", "").len(), 1);
    // The restart is recorded on the job, so it survives the controller.
    let job = pytorchjob(&bed, &ml, "pt").await;
    let ann = job.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ann.get("rebound.dev/restart-count").map(String::as_str),
        Some("1"),
        "{ann:?}"
    );
    assert!(ann.contains_key("rebound.dev/last-restart"));
    // Each restart's critical path is traced, stage by stage, from the
    // step of the pod event that carried its fault: three restarts by
    // their delete; Volcano's by its record, which goes before its Command
    // (the Command leaves in the step of the record's answer).
    let m = ctl.metrics.encode();
    for (action, n) in [("restart_job", 3.0), ("record", 1.0)] {
        for stage in rebound::metrics::PATH_STAGES {
            let count = m
                .lines()
                .find(|l| {
                    l.starts_with("rebound_critical_path_seconds_count{")
                        && l.contains(&format!("stage=\"{stage}\""))
                        && l.contains(&format!("action=\"{action}\""))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
            assert_eq!(count, Some(n), "stage {stage} of {action}:\n{m}");
        }
    }
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn cooldown_holds_the_second_failure_and_co_failing_pods_restart_once(server: Server) {
    let (bed, ctl) = bed_with(server, 4, "", None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    c.create_pytorchjob(&ml, "pt", 3, &[OPT_IN]).await.unwrap();
    let sel = format!("{PT}=pt");
    wait("pt running", T, || async {
        (running(&bed, &ml, &sel).await.len() >= 4).then_some(())
    })
    .await;
    // Three pods fail together (an NCCL cascade): one restart.
    for w in 0..3 {
        // The restart may already have removed the next pod: that is fine.
        let _ = c
            .fail_container(&ml, &format!("pt-worker-{w}"), "pytorch", 1, "Error")
            .await;
    }
    wait("first restart", T, || async {
        (job_restarts(&bed, &ml, "pt").await >= 1).then_some(())
    })
    .await;
    wait("pt running again", T, || async {
        (running(&bed, &ml, &sel).await.len() >= 4).then_some(())
    })
    .await;
    // The controller saw it running again too (its recovery ended): a
    // failure before that is part of the recovery still under way, and
    // waits for it, not for the cooldown (a loaded server's watch can
    // deliver "running again" after the next failure).
    resumed(&bed, &ml, "pt", 1).await;
    // A new failure within the 1m cooldown: no second restart. The
    // positive control first: the controller decided it (held for the
    // cooldown), then nothing was restarted.
    let held = || decisions(&ctl, "Cooldown");
    let held_before = held();
    c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("the second failure decided (held)", T, || async {
        (held() > held_before).then_some(())
    })
    .await;
    assert_eq!(
        job_restarts(&bed, &ml, "pt").await,
        1,
        "cooldown must hold the second restart"
    );
    // The root cause names the first pod to fail.
    let job = pytorchjob(&bed, &ml, "pt").await;
    let rc = job
        .metadata
        .annotations
        .unwrap_or_default()
        .get("rebound.dev/root-cause")
        .cloned()
        .unwrap_or_default();
    assert!(rc.contains("pt-worker-"), "root cause recorded: {rc:?}");
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn budget_exhausted_marks_the_job_and_hardware_restarts_are_free(server: Server) {
    let policy = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: tight, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
  restartBudget: {maxRestarts: 1, window: 1h}
"#;
    let (bed, ctl) = bed_with(server, 4, policy, None).await;
    let ml = bed.ns("ml");
    let c = &bed.cluster;
    c.create_pytorchjob(&ml, "pt", 1, &[OPT_IN]).await.unwrap();
    let sel = format!("{PT}=pt");
    let up = || async { (running(&bed, &ml, &sel).await.len() >= 2).then_some(()) };
    wait("pt running", T, up).await;
    // A hardware fault first: restarts, but is free.
    let n = node_of(&bed, &ml, &sel).await;
    xid_condition(&bed, &n, "79").await;
    wait("hardware restart", T, || async {
        (job_restarts(&bed, &ml, "pt").await >= 1).then_some(())
    })
    .await;
    wait("pt running again", T, up).await;
    // One job fault: within the budget.
    c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("budgeted restart", T, || async {
        (job_restarts(&bed, &ml, "pt").await >= 2).then_some(())
    })
    .await;
    wait("pt running again", T, up).await;
    // The next one exhausts the budget: no restart, the job is marked.
    c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("job marked budget-exhausted", T, || async {
        pytorchjob(&bed, &ml, "pt")
            .await
            .metadata
            .annotations?
            .get("rebound.dev/budget-exhausted")
            .map(|_| ())
    })
    .await;
    assert_eq!(job_restarts(&bed, &ml, "pt").await, 2);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn graded_restart_pod_first_then_the_job_and_logs_are_preserved(server: Server) {
    let policy = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: graded, namespace: team-a}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
  escalation: {restartPodFirst: true, jobAfter: 1s}
  preserveLogs: {tailLines: 50}
"#;
    let mut cfg = SimConfig {
        nodes: 4,
        ..SimConfig::default()
    };
    // Recreated pods take 3 s to run: the job is not Running again within
    // jobAfter, so the whole job is restarted.
    cfg.kubelet.start_delay = Duration::from_secs(3);
    // As on a real cluster, a deleted pod terminates over a moment (its
    // processes get SIGTERM) and serves its logs meanwhile: rebound reads
    // them beside the restart, not before it.
    cfg.hold_pod_deletion = true;
    cfg.kubelet.costs.stop = Duration::from_millis(1500);
    let (bed, ctl) = bed_with(server, 4, policy, Some(cfg)).await;
    let team_a = bed.ns("team-a");
    let c = &bed.cluster;
    c.create_pytorchjob(&team_a, "pt", 1, &[OPT_IN])
        .await
        .unwrap();
    let sel = format!("{PT}=pt");
    wait("pt running", Duration::from_secs(15), || async {
        (running(&bed, &team_a, &sel).await.len() >= 2).then_some(())
    })
    .await;
    bed.set_pod_log(
        &team_a,
        "pt-worker-0",
        "pytorch",
        "step 41\nstep 42\nNCCL error: unhandled system error\n".into(),
    )
    .expect("pod log");
    c.fail_container(&team_a, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("the failed pod deleted alone", T, || async {
        (!requests(&bed, "delete", "pods", "").is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        job_restarts(&bed, &team_a, "pt").await,
        0,
        "pod first, not the job"
    );
    wait("the whole job restarted after jobAfter", T, || async {
        (job_restarts(&bed, &team_a, "pt").await == 1).then_some(())
    })
    .await;
    // Logs were saved (while the deleted pod terminated), in a ConfigMap
    // owned by the job.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(bed.client(), &team_a);
    let list = cms
        .list(&ListParams::default().labels("rebound.dev/logs"))
        .await
        .unwrap();
    let saved: String = list
        .items
        .iter()
        .flat_map(|cm| cm.data.clone().unwrap_or_default().into_values())
        .collect();
    assert!(saved.contains("NCCL error"), "saved logs: {saved:?}");
    assert!(list.items.iter().all(|cm| {
        cm.metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| o.iter().any(|r| r.name == "pt"))
    }));
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// A restart of a 32-pod job saves every pod's log though the pods go
/// within seconds of their delete, and the LogsPreserved Event says none
/// was lost (issue 32 item 7). A guard, not the demonstration: reads one
/// after another also pass here; at 64 pods gone within 400 ms they lost
/// 33 of 64 logs on the real server, side by side none in 4 of 5 runs (a
/// window too tight to test on a shared CI machine).
async fn every_pods_log_is_saved_though_the_pods_go_within_seconds(server: Server) {
    let policy = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: logs, namespace: team-a}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
  preserveLogs: {tailLines: 20}
"#;
    let mut cfg = SimConfig {
        nodes: 8,
        ..SimConfig::default()
    };
    // A deleted pod serves its logs for five seconds, then it is gone (one
    // second lost 4 of 32 logs once under the full suite's load on 2
    // cores: the save itself started late).
    cfg.hold_pod_deletion = true;
    cfg.kubelet.costs.stop = Duration::from_secs(5);
    let (bed, ctl) = bed_with(server, 8, policy, Some(cfg)).await;
    let team_a = bed.ns("team-a");
    let c = &bed.cluster;
    c.create_pytorchjob(&team_a, "big", 31, &[OPT_IN])
        .await
        .unwrap();
    let sel = format!("{PT}=big");
    wait("32 pods running", Duration::from_secs(60), || async {
        (running(&bed, &team_a, &sel).await.len() >= 32).then_some(())
    })
    .await;
    for p in running(&bed, &team_a, &sel).await {
        let name = p.metadata.name.clone().unwrap_or_default();
        bed.set_pod_log(&team_a, &name, "pytorch", format!("{name}: step 7\n"))
            .expect("pod log");
    }
    c.fail_container(&team_a, "big-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(bed.client(), &team_a);
    let note = wait("LogsPreserved on the job", T, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("LogsPreserved"))
            .find_map(|e| e.note)
    })
    .await;
    assert!(
        note.contains("of 32 pod(s)") && !note.contains("could not be read"),
        "{note}"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(bed.client(), &team_a);
    let data: std::collections::BTreeMap<String, String> = cms
        .list(&ListParams::default().labels("rebound.dev/logs"))
        .await
        .unwrap()
        .items
        .into_iter()
        .flat_map(|cm| cm.data.unwrap_or_default())
        .collect();
    let logs = data.keys().filter(|k| k.ends_with(".pytorch")).count();
    assert_eq!(logs, 32, "{:?}", data.keys().collect::<Vec<_>>());
    assert!(data.values().any(|v| v.contains("big-worker-30: step 7")));
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

e2e!(pod_exit_restarts_each_job_kind_in_one_request);
e2e!(every_pods_log_is_saved_though_the_pods_go_within_seconds);
e2e!(cooldown_holds_the_second_failure_and_co_failing_pods_restart_once);
e2e!(budget_exhausted_marks_the_job_and_hardware_restarts_are_free);
e2e!(graded_restart_pod_first_then_the_job_and_logs_are_preserved);
