//! Every manifest `rebound inject` writes is accepted by a real API server
//! (custom resources with `dryRun=All`, a Pod of every wired template, a
//! batch Job created for real), or refused or pruned as `inject` warns.

use super::*;

#[tokio::test]
async fn every_manifest_inject_writes_is_accepted_by_a_real_api_server() {
    let _watchdog = crate::watchdog::start();
    let Some(cp) = plane() else { return };
    let client = admin(cp).await;
    let ns = "inject-accept";
    namespace(&client, ns).await;
    real_crds(&client).await;

    let input = fixtures(ns);
    let (ok, out, err) = rebound(&[], &to_yaml(&input));
    assert!(ok, "rebound inject failed: {err}");
    let docs = docs_of(&out);
    assert_eq!(docs.len(), input.len(), "the same documents come out");
    // Kubeflow (6 kinds x 2 replica types, JAXJob's one map key twice is
    // one), Volcano 1, JobSet 1, batch 1, the two runtimes' trainer nodes.
    let mut wired = Vec::new();
    for d in &docs {
        wired_templates(d, "", &mut wired);
    }
    assert_eq!(wired.len(), 5 * 2 + 1 + 1 + 1 + 1 + 2, "wired templates");
    assert!(
        err.contains("TrainJob cannot carry the agent"),
        "TrainJob note: {err}"
    );

    let mut pruned_kinds = BTreeSet::new();
    for d in &docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let (path, crd) = collection(d);
        let knows_rules = crd.is_none_or(|f| shared_crd(f).contains("restartPolicyRules"));
        let strict = post(
            &client,
            &format!("{path}?dryRun=All&fieldValidation=Strict"),
            d,
        )
        .await;
        let mut returned = Vec::new();
        let has_wired = {
            let mut w = Vec::new();
            wired_templates(d, "", &mut w);
            !w.is_empty()
        };
        if knows_rules || !has_wired {
            let back = strict.unwrap_or_else(|e| panic!("{kind} refused: {e}"));
            wired_templates(&back, "", &mut returned);
            for (at, tpl) in &returned {
                let a = agent_of(tpl);
                assert_eq!(
                    a["restartPolicyRules"][0]["action"], "RestartAllContainers",
                    "{kind}{at}: the rule survives"
                );
                assert_eq!(a["restartPolicy"], "Always", "{kind}{at}");
                assert_eq!(a["startupProbe"]["httpGet"]["path"], "/barrier");
            }
        } else {
            // The CRD's pod template schema predates the field: strict
            // validation refuses it, lenient validation drops it.
            let e = strict.expect_err("strict refusal of an unknown field");
            assert!(e.to_string().contains("restartPolicyRules"), "{kind}: {e}");
            let back = post(
                &client,
                &format!("{path}?dryRun=All&fieldValidation=Ignore"),
                d,
            )
            .await
            .unwrap_or_else(|e| panic!("{kind} refused even without strict validation: {e}"));
            wired_templates(&back, "", &mut returned);
            for (at, tpl) in &returned {
                let a = agent_of(tpl);
                assert!(a.get("restartPolicyRules").is_none(), "{kind}{at}: pruned");
                assert_eq!(
                    a["restartPolicy"], "Always",
                    "{kind}{at}: the sidecar itself survives"
                );
            }
            assert!(
                err.contains(&kind) || kind.ends_with("TrainingRuntime"),
                "inject warns about {kind}: {err}"
            );
            pruned_kinds.insert(kind.clone());
        }
        if has_wired {
            assert!(!returned.is_empty(), "{kind}: the server kept the agent");
        }
    }
    // The shipped CRDs: JobSet v0.12 and Volcano know the rules; the
    // training-operator v1.9 and Trainer a55f03a CRDs do not (what the
    // inject warnings and docs/in-place.md say).
    assert_eq!(
        pruned_kinds,
        BTreeSet::from(
            [
                "ClusterTrainingRuntime",
                "JAXJob",
                "MPIJob",
                "PaddleJob",
                "PyTorchJob",
                "TFJob",
                "TrainingRuntime",
                "XGBoostJob"
            ]
            .map(String::from)
        )
    );
    assert!(err.contains("Trainer v2 runtime"), "{err}");

    // A Pod of every wired template: the real pod validation of the
    // sidecar, its rule, probe, ports, env, resources and security.
    for (i, (at, tpl)) in wired.iter().enumerate() {
        let pod = pod_of(tpl, &format!("pod-{i}"), ns, "job-x");
        let back = post(
            &client,
            &format!("/api/v1/namespaces/{ns}/pods?dryRun=All&fieldValidation=Strict"),
            &pod,
        )
        .await
        .unwrap_or_else(|e| panic!("pod of {at} refused: {e}"));
        let a = agent_of(&back);
        assert_eq!(
            a["restartPolicyRules"][0]["exitCodes"]["values"],
            json!([87])
        );
    }

    // A batch Job for real: the Job controller makes its pods, which carry
    // the label the agent reads and the agent with its rule.
    let job = docs
        .iter()
        .find(|d| d["apiVersion"] == "batch/v1")
        .expect("batch job");
    post(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/jobs"),
        job,
    )
    .await
    .expect("batch job created");
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<Pod>(&()));
    let made = wait_for(T, "the Job controller's pods", || async {
        let l = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=batchjob"))
            .await?;
        Ok((l.items.len() == 2).then_some(l.items))
    })
    .await
    .expect("pods of the batch Job");
    for p in &made {
        let v = serde_json::to_value(p).expect("pod json");
        let a = agent_of(&v);
        assert_eq!(a["restartPolicyRules"][0]["action"], "RestartAllContainers");
        assert_eq!(
            p.labels().get(&job_name_label(a)).map(String::as_str),
            Some("batchjob"),
            "REBOUND_JOB_NAME resolves to the Job"
        );
    }
}
