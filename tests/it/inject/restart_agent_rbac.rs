//! The `rebound-restart-agent` ClusterRole: a ServiceAccount bound to it
//! can GET and WATCH its own job by name, and nothing else.

use super::*;

/// RBAC: verbs a subject may use on a resource, per the real authorizer.
async fn allowed(
    client: &Client,
    user: &str,
    ns: &str,
    group: &str,
    res: &str,
    verb: &str,
) -> bool {
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user,
                 "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                 "resourceAttributes": {"namespace": ns, "group": group, "resource": res, "verb": verb}}});
    let r = post(
        client,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &sar,
    )
    .await
    .expect("SubjectAccessReview");
    r["status"]["allowed"] == true
}

#[tokio::test]
async fn the_restart_agent_role_allows_get_and_watch_of_its_job_and_nothing_else() {
    let _watchdog = crate::watchdog::start();
    let Some(cp) = plane() else { return };
    let client = admin(cp).await;
    let ns = "inject-rbac";
    namespace(&client, ns).await;
    namespace(&client, "inject-rbac-other").await;
    real_crds(&client).await;

    // config/rbac's ClusterRoles, applied as they are.
    let text = std::fs::read_to_string(root().join("config/rbac/restart_agent_role.yaml"))
        .expect("role file");
    for d in serde_saphyr::from_multiple::<Value>(&text).expect("yaml") {
        if d.is_null() {
            continue;
        }
        let name = d["metadata"]["name"].as_str().expect("name").to_string();
        let p = format!(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}?fieldManager=test&force=true"
        );
        let req = http::Request::patch(p)
            .header("content-type", "application/apply-patch+yaml")
            .body(serde_json::to_vec(&d).expect("json"))
            .expect("req");
        client
            .request::<Value>(req)
            .await
            .unwrap_or_else(|e| panic!("apply {name}: {e}"));
    }
    // The aggregation controller fills the aggregated role.
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    wait_for(T, "aggregated rules", || async {
        let r = roles.get("rebound-restart-agent").await?;
        Ok(r.rules.is_some_and(|r| !r.is_empty()).then_some(()))
    })
    .await
    .expect("the control plane aggregates the job rules");

    // The job's ServiceAccount, bound in its namespace as the docs say.
    post(
        &client,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        &json!({"metadata": {"name": "trainer"}}),
    )
    .await
    .expect("sa");
    post(
        &client,
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        &json!({"metadata": {"name": "rebound-restart-agent"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rebound-restart-agent"},
                "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": ns}]}),
    )
    .await
    .expect("rolebinding");
    let user = format!("system:serviceaccount:{ns}:trainer");
    // The authorizer reads roles and bindings from its cache: wait until
    // the binding (and the aggregated rules) reached it.
    wait_for(T, "the RoleBinding in effect", || async {
        Ok(allowed(
            &client,
            &user,
            ns,
            "trainer.kubeflow.org",
            "trainjobs",
            "watch",
        )
        .await
        .then_some(()))
    })
    .await
    .expect("binding effective");
    for (group, res) in [
        ("kubeflow.org", "pytorchjobs"),
        ("kubeflow.org", "mpijobs"),
        ("batch.volcano.sh", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("batch", "jobs"),
        ("trainer.kubeflow.org", "trainjobs"),
    ] {
        for verb in ["get", "watch"] {
            assert!(
                allowed(&client, &user, ns, group, res, verb).await,
                "{verb} {group}/{res}"
            );
        }
        for verb in [
            "list",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ] {
            assert!(
                !allowed(&client, &user, ns, group, res, verb).await,
                "{verb} {group}/{res} must be refused"
            );
        }
        assert!(
            !allowed(&client, &user, "inject-rbac-other", group, res, "get").await,
            "{group}/{res} in another namespace"
        );
    }
    for (group, res) in [("", "pods"), ("", "secrets"), ("", "configmaps")] {
        assert!(
            !allowed(&client, &user, ns, group, res, "get").await,
            "{res}"
        );
    }

    // As the ServiceAccount itself, with a token from the TokenRequest API.
    let pj = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "llm", "namespace": ns},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": pod_template("pytorch")}}}});
    post(
        &client,
        &format!("/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"),
        &pj,
    )
    .await
    .expect("pytorchjob");
    let tr = post(
        &client,
        &format!("/api/v1/namespaces/{ns}/serviceaccounts/trainer/token"),
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}),
    )
    .await
    .expect("token request");
    let token = tr["status"]["token"].as_str().expect("token");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: sa}}\ncurrent-context: c\n",
        cp.url(),
        cp.dir().join("ca.crt").display()
    );
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let sa = Client::try_from(cfg).expect("sa client");
    let res = ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "PyTorchJob".into(),
        plural: "pytorchjobs".into(),
    };
    let jobs: Api<DynamicObject> = Api::namespaced_with(sa.clone(), ns, &res);
    let got = jobs
        .get_metadata("llm")
        .await
        .expect("the agent GETs its job");
    let rv = got.resource_version().expect("resourceVersion");
    let mut watch = jobs
        .watch_metadata(&WatchParams::default().fields("metadata.name=llm"), &rv)
        .await
        .expect("the agent watches its job by name")
        .boxed();
    // An annotation written by rebound reaches the agent's watch.
    let admin_jobs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &res);
    admin_jobs
        .patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"annotations": {"rebound.dev/restart-generation": "1"}}}),
            ),
        )
        .await
        .expect("admin patch");
    let ev = tokio::time::timeout(T, async {
        loop {
            match watch.try_next().await {
                Ok(Some(WatchEvent::Modified(m))) => break m,
                Ok(Some(_)) => continue,
                Ok(None) => panic!("watch ended"),
                Err(e) => panic!("watch error: {e}"),
            }
        }
    })
    .await
    .expect("a MODIFIED event in time");
    assert_eq!(
        ev.annotations()
            .get("rebound.dev/restart-generation")
            .map(String::as_str),
        Some("1")
    );
    let refused = |r: Result<(), kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: expected 403, got {other:?}"),
    };
    refused(
        jobs.list_metadata(&ListParams::default()).await.map(|_| ()),
        "list",
    );
    refused(
        jobs.patch(
            "llm",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .map(|_| ()),
        "patch",
    );
    refused(
        jobs.delete("llm", &Default::default()).await.map(|_| ()),
        "delete",
    );
    let mut copy: DynamicObject = serde_json::from_value(pj.clone()).expect("pj");
    copy.metadata.name = Some("other".into());
    refused(
        jobs.create(&PostParams::default(), &copy).await.map(|_| ()),
        "create",
    );
    let other: Api<DynamicObject> = Api::namespaced_with(sa.clone(), "inject-rbac-other", &res);
    refused(
        other.get_metadata("llm").await.map(|_| ()),
        "get in another namespace",
    );
    let pods: Api<Pod> = Api::namespaced(sa, ns);
    refused(
        pods.list(&ListParams::default()).await.map(|_| ()),
        "list pods",
    );
}
