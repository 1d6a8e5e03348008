//! What `inject` refuses, the real API server refuses too.

use super::*;

#[tokio::test]
async fn what_inject_refuses_the_real_api_server_refuses() {
    let _watchdog = crate::watchdog::start();
    let Some(cp) = plane() else { return };
    let client = admin(cp).await;
    let ns = "inject-refuse";
    namespace(&client, ns).await;

    // A regular container with the agent's name.
    let bad = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": AGENT_CONTAINER, "image": "registry.local/train:1"}]}}}}}]}});
    let text = to_yaml(std::slice::from_ref(&bad));
    let (ok, out, err) = rebound(&[], &text);
    assert!(!ok, "refused");
    assert!(out.is_empty(), "nothing written: {out}");
    assert!(
        err.contains("document 1 (JobSet inject-refuse/bad): spec.replicatedJobs[0].template.spec.template.spec.containers[0].name:"),
        "{err}"
    );
    // What inject would have written: the template plus the agent.
    let good = fixtures(ns)
        .into_iter()
        .find(|d| d["kind"] == "JobSet")
        .expect("jobset");
    let (ok, wired_out, e) = rebound(&[], &to_yaml(&[good]));
    assert!(ok, "{e}");
    let mut wired = Vec::new();
    wired_templates(&docs_of(&wired_out)[0], "", &mut wired);
    let agent = agent_of(&wired[0].1).clone();
    let mut tpl = bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"].clone();
    tpl["spec"]["initContainers"] = json!([agent]);
    let pods = format!("/api/v1/namespaces/{ns}/pods?dryRun=All");
    let e = post(&client, &pods, &pod_of(&tpl, "dup", ns, "bad"))
        .await
        .expect_err("the server refuses the duplicate name");
    assert!(
        e.to_string().contains("spec.initContainers[0].name")
            && e.to_string().contains("Duplicate"),
        "{e}"
    );
    // With --ignore-unsupported the document passes through unchanged.
    let (ok, out, err) = rebound(&["--ignore-unsupported"], &text);
    assert!(ok, "{err}");
    assert_eq!(docs_of(&out), vec![bad.clone()]);
    assert!(err.contains("written unchanged"), "{err}");

    // A probe port the server refuses, refused by inject first.
    let (ok, out, err) = rebound(&["--probe-port", "0"], &text);
    assert!(
        !ok && out.is_empty() && err.contains("--probe-port"),
        "{err}"
    );
    let mut zero = wired[0].1.clone();
    zero["spec"]["initContainers"][0]["startupProbe"]["httpGet"]["port"] = json!(0);
    let e = post(&client, &pods, &pod_of(&zero, "zero", ns, "j"))
        .await
        .expect_err("port 0 refused");
    assert!(e.to_string().contains("startupProbe.httpGet.port"), "{e}");
}
