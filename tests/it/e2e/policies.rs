//! Policy selection, dry run and invalid CEL, end to end.

use super::*;

async fn root_default_vs_namespace_override_and_dry_run(server: Server) {
    let own = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: pods-only, namespace: team-a}
spec:
  action: RestartPod
  cooldown: 0s
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: trial, namespace: team-b}
spec:
  dryRun: true
"#;
    let (bed, ctl) = bed_with(server, 4, own, None).await;
    let c = &bed.cluster;
    let [ml, team_a, team_b] = ["ml", "team-a", "team-b"].map(|n| bed.ns(n));
    for ns in [&ml, &team_a, &team_b] {
        c.create_pytorchjob(ns, "pt", 1, &[OPT_IN]).await.unwrap();
    }
    let sel = format!("{PT}=pt");
    for ns in [&ml, &team_a, &team_b] {
        wait("pt running", T, || async {
            (running(&bed, ns, &sel).await.len() >= 2).then_some(())
        })
        .await;
        c.fail_container(ns, "pt-worker-0", "pytorch", 1, "Error")
            .await
            .unwrap();
    }
    // ml: no policy of its own → the root default restarts the job.
    wait("ml job restarted by the root default", T, || async {
        requests(&bed, "deletecollection", "pods", "")
            .iter()
            .any(|r| r.namespace.as_deref() == Some(ml.as_str()))
            .then_some(())
    })
    .await;
    // team-a: its own policy restarts only the pod.
    wait("team-a pod restarted", T, || async {
        requests(&bed, "delete", "pods", "")
            .iter()
            .any(|r| {
                r.namespace.as_deref() == Some(team_a.as_str()) && r.path.ends_with("pt-worker-0")
            })
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let by_ns = |ns: &str| {
        bed.requests()
            .into_iter()
            .filter(|r| {
                by_controller(r)
                    && r.namespace.as_deref() == Some(ns)
                    && r.resource == "pods"
                    && matches!(r.verb, "delete" | "deletecollection")
            })
            .count()
    };
    assert_eq!(by_ns(&team_a), 1, "team-a: one pod delete, no job restart");
    assert_eq!(by_ns(&team_b), 0, "team-b: dry run acts on nothing");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(bed.client(), &team_b);
    wait("the dry run is recorded", T, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("RestartSkipped")
                    && e.note.as_deref().is_some_and(|n| n.contains("DryRun"))
            })
            .then_some(())
    })
    .await;
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn invalid_cel_sets_ready_false_and_the_policy_is_not_used(server: Server) {
    let bad = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: broken, namespace: team-a}
spec:
  when: 'job.restarts <'
  action: None
"#;
    let (bed, ctl) = bed_with(server, 4, bad, None).await;
    let team_a = bed.ns("team-a");
    let rps: Api<rebound::api::RecoveryPolicy> = Api::namespaced(bed.client(), &team_a);
    let cond = wait("Ready=False InvalidExpression", T, || async {
        let p = rps.get("broken").await.ok()?;
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")
    })
    .await;
    assert_eq!(cond.reason, "InvalidExpression");
    assert!(cond.message.contains("spec.when"), "{}", cond.message);
    // Said once as a Warning Event on the policy, naming the field.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(bed.client(), &team_a);
    let invalid = || async {
        events
            .list(&ListParams::default())
            .await
            .ok()
            .into_iter()
            .flat_map(|l| l.items)
            .filter(|e| {
                e.reason.as_deref() == Some("InvalidPolicy")
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("RecoveryPolicy")
                            && r.name.as_deref() == Some("broken")
                    })
            })
            .collect::<Vec<_>>()
    };
    let ev = wait("InvalidPolicy Event on the policy", T, || async {
        invalid().await.into_iter().next()
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.note.as_deref().is_some_and(|n| n.contains("spec.when")),
        "{:?}",
        ev.note
    );
    // Not used: the root default covers team-a's job and restarts it
    // (the broken policy would have said action None).
    running_pytorchjob(&bed, &team_a, "pt", 1).await;
    bed.cluster
        .fail_container(&team_a, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    wait("restarted by the root default", T, || async {
        (job_restarts(&bed, &team_a, "pt").await == 1).then_some(())
    })
    .await;
    // Status writes since (every 500 ms here) did not repeat the Event.
    let again = invalid().await;
    assert_eq!(again.len(), 1, "one Event per generation: {again:?}");
    assert!(
        again[0].series.is_none(),
        "not repeated into a series: {:?}",
        again[0].series
    );
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// A tenant's policy whose `when` is ten nested comprehensions (10^10
/// steps in a few hundred bytes) is refused when compiled, says so in its
/// status, and is not used: recovery goes on for its own job (root
/// default) and for another namespace's job at the same time.
async fn exponential_cel_is_refused_and_recovery_goes_on(server: Server) {
    let list = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]";
    let mut when = "a0 < a9".to_string();
    for d in (0..10).rev() {
        when = format!("{list}.all(a{d}, {when})");
    }
    let own = format!(
        r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: costly, namespace: team-a}}
spec:
  when: '{when}'
  action: None
"#
    );
    let (bed, ctl) = bed_with(server, 4, &own, None).await;
    let [team_a, team_b] = ["team-a", "team-b"].map(|n| bed.ns(n));
    let rps: Api<rebound::api::RecoveryPolicy> = Api::namespaced(bed.client(), &team_a);
    let cond = wait("Ready=False ExpressionTooExpensive", T, || async {
        let p = rps.get("costly").await.ok()?;
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")
    })
    .await;
    assert_eq!(cond.reason, "ExpressionTooExpensive", "{}", cond.message);
    assert!(cond.message.contains("spec.when"), "{}", cond.message);
    assert!(
        cond.message.contains("estimated worst-case cost")
            && cond.message.contains("exceeds the limit of 100000"),
        "{}",
        cond.message
    );
    // Recovery goes on: another namespace's job and the tenant's own (the
    // refused policy would have said action None) both restart.
    for ns in [&team_b, &team_a] {
        running_pytorchjob(&bed, ns, "pt", 1).await;
    }
    for ns in [&team_b, &team_a] {
        bed.cluster
            .fail_container(ns, "pt-worker-0", "pytorch", 1, "Error")
            .await
            .unwrap();
    }
    for ns in [&team_b, &team_a] {
        wait("restarted by the root default", T, || async {
            (job_restarts(&bed, ns, "pt").await == 1).then_some(())
        })
        .await;
        assert!(
            requests(&bed, "deletecollection", "pods", "")
                .iter()
                .any(|r| r.namespace.as_deref() == Some(ns.as_str())),
            "{ns}: the job's pods were deleted"
        );
    }
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

/// A team's budget of 1,000 restarts in 30 days is accepted by the API
/// server and compiled by rebound (Ready=True); one above the largest
/// budget rebound can count is refused by the server's schema on the real
/// API server, and by rebound's own compile (Ready=False InvalidBudget)
/// wherever the schema did not stop it.
async fn a_thousand_restarts_in_thirty_days_is_a_valid_budget(server: Server) {
    let big = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: big, namespace: team-a}
spec:
  restartBudget: {maxRestarts: 1000, window: 720h}
"#;
    let (bed, ctl) = bed_with(server, 2, big, None).await;
    let team_a = bed.ns("team-a");
    let rps: Api<rebound::api::RecoveryPolicy> = Api::namespaced(bed.client(), &team_a);
    let ready = |name: &'static str| {
        let rps = rps.clone();
        async move {
            let p = rps.get(name).await.ok()?;
            p.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")
        }
    };
    let cond = wait("Ready of the 1,000-restart budget", T, || ready("big")).await;
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", "Compiled"),
        "{cond:?}"
    );
    let too_big = big
        .replace("name: big", "name: too-big")
        .replace("1000", &(rebound::policy::MAX_BUDGET + 1).to_string());
    match bed.apply_yaml(&too_big).await {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("2000"), "refused naming the bound: {e}");
        }
        Ok(_) => {
            assert!(
                !bed.is_real(),
                "the real API server checks the CRD's maximum"
            );
            let cond = wait("Ready of the too-large budget", T, || ready("too-big")).await;
            assert_eq!(
                (cond.status.as_str(), cond.reason.as_str()),
                ("False", "InvalidBudget")
            );
        }
    }
    ctl.shutdown().await;
}

e2e!(root_default_vs_namespace_override_and_dry_run);
e2e!(a_thousand_restarts_in_thirty_days_is_a_valid_budget);
e2e!(invalid_cel_sets_ready_false_and_the_policy_is_not_used);
e2e!(exponential_cel_is_refused_and_recovery_goes_on);
