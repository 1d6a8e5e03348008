//! The shared-cluster path, exercised on every run: a bare embedded API
//! server (no actors, as `rebound sim-server` serves) stands in for a real
//! cluster and the bed connects to it by kubeconfig, as it does with
//! `REBOUND_E2E_KUBECONFIG`.

use super::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use rebound_sim::cluster::SharedCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bed_on_a_bare_server_by_kubeconfig_recovers_jobs_on_fake_nodes_and_cleans_up() {
    let _watchdog = crate::watchdog::start();
    rebound_sim::testbed::check_restart_endings(on_a_bare_server()).await;
}

async fn on_a_bare_server() {
    let path = std::env::temp_dir().join(format!(
        "rebound-e2e-bare-{}.kubeconfig",
        std::process::id()
    ));
    let server = rebound_sim::bare::start(0, &path)
        .await
        .expect("bare server");
    let bed = Testbed::connect(
        &path,
        SimConfig {
            nodes: 3,
            ..SimConfig::default()
        },
    )
    .await
    .expect("shared test bed");
    assert!(bed.is_shared());
    let (bed, ctl) = ready_bed(bed, "").await;
    let ml = bed.ns("ml");
    assert_ne!(ml, "ml", "a per-run namespace");
    let shared = SharedCluster::default();

    // Fake nodes: per-run names, a taint that keeps real pods away, Leases
    // renewed as a kubelet's.
    let names = bed.cluster.node_names();
    assert!(names.iter().all(|n| n.starts_with("rb-")), "{names:?}");
    for n in &names {
        let nd = node(&bed, n).await;
        let taints = nd.spec.and_then(|s| s.taints).unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == shared.taint_key && t.effect == "NoSchedule"),
            "{n}: {taints:?}"
        );
    }
    let leases: Api<Lease> = Api::namespaced(bed.client(), "kube-node-lease");
    wait("node Leases renewed", T, || async {
        let l = leases.get_opt(&names[0]).await.ok()??;
        l.spec?.renew_time.map(|_| ())
    })
    .await;

    // A job's pods ask for the simulated scheduler, land on fake nodes and run.
    let sel = running_pytorchjob(&bed, &ml, "pt", 1).await;
    for p in running(&bed, &ml, &sel).await {
        let spec = p.spec.unwrap_or_default();
        assert_eq!(
            spec.scheduler_name.as_deref(),
            Some(shared.scheduler_name.as_str())
        );
        assert!(spec.node_name.is_some_and(|n| names.contains(&n)));
    }

    // A node fault cordons the fake node and restarts the job on it.
    let n = node_of(&bed, &ml, &sel).await;
    xid_condition(&bed, &n, "79").await;
    let nd = wait("fake node cordoned", T, || async {
        let nd = node(&bed, &n).await;
        cordoned(&nd).then_some(nd)
    })
    .await;
    let taints = nd.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.key == shared.taint_key),
        "rebound's cordon keeps the taints it found: {taints:?}"
    );
    wait("job restarted after the node fault", T, || async {
        (restart_count(&bed, &ml, "pt").await == 1).then_some(())
    })
    .await;

    // A pod exit restarts another job; its pods are replaced and run again.
    let sel2 = running_pytorchjob(&bed, &ml, "pt2", 1).await;
    let before: Vec<String> = running(&bed, &ml, &sel2)
        .await
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    bed.cluster
        .fail_container(&ml, "pt2-master-0", "pytorch", 1, "Error")
        .await
        .expect("fail container");
    wait("pt2 restarted and running on new pods", T, || async {
        let pods = running(&bed, &ml, &sel2).await;
        (restart_count(&bed, &ml, "pt2").await == 1
            && pods.len() == 2
            && pods
                .iter()
                .all(|p| p.metadata.uid.as_ref().is_some_and(|u| !before.contains(u))))
        .then_some(())
    })
    .await;

    every_restart_ends(&bed).await;
    ctl.shutdown().await;
    // The bed's requests went through its proxy, which goes with it:
    // check the clean-up on the server directly.
    let client = server.client();
    bed.cleanup().await;
    // What the bed made is gone again (the bare server deletes at once; a
    // real one finishes namespace deletion in the background).
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes");
    assert!(
        nodes
            .items
            .iter()
            .all(|n| !names.contains(&n.metadata.name.clone().unwrap_or_default())),
        "fake nodes deleted"
    );
    let ns = Api::<Namespace>::all(client)
        .get_opt(&ml)
        .await
        .expect("namespace");
    assert!(
        ns.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "the run's namespace deleted"
    );
    server.shutdown().await;
    let _ = std::fs::remove_file(&path);
}

/// A CRD of a kind nobody serves, named for the run.
fn widget_crd(group: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#
    )
}

async fn crds_are_installed_once_updated_after_and_a_real_operators_are_refused(server: Server) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
    use kube::api::{DeleteParams, PostParams};
    use rebound_sim::cluster::{ClusterError, TESTBED_LABEL, install_crds, install_own_crds};
    let bed = bed(
        server,
        SimConfig {
            nodes: 1,
            ..SimConfig::default()
        },
    )
    .await;
    let client = bed.client();
    let crds: Api<Crd> = Api::all(client.clone());
    // The job CRDs the bed installed are labelled as its own; installing
    // again (the next run) replaces them.
    let pt = crds.get("pytorchjobs.kubeflow.org").await.expect("crd");
    if bed.runs_real_operators() {
        // The real training-operator's CRD: a simulated operator's is
        // refused beside it.
        assert_eq!(
            pt.metadata.labels.unwrap_or_default().get(TESTBED_LABEL.0),
            None
        );
        let err = install_crds(&client, rebound_sim::cluster::JOB_CRDS[0])
            .await
            .expect_err("the real operator's CRD is not replaced");
        assert!(
            matches!(&err, ClusterError::Unsupported(m) if m.contains("pytorchjobs.kubeflow.org")),
            "{err}"
        );
    } else if bed.is_shared() {
        assert_eq!(
            pt.metadata
                .labels
                .unwrap_or_default()
                .get(TESTBED_LABEL.0)
                .map(String::as_str),
            Some(TESTBED_LABEL.1)
        );
        let names = install_crds(&client, rebound_sim::cluster::JOB_CRDS[0])
            .await
            .expect("a second run updates its own CRD");
        assert_eq!(names, vec!["pytorchjobs.kubeflow.org".to_string()]);
    }
    // Someone else's CRD (a real operator's) is refused for a simulated
    // operator, but rebound's own are updated even when someone else (an
    // installed rebound) made them.
    let group = format!("{}.example.com", bed.ns("rb"));
    let yaml = widget_crd(&group);
    let foreign: Crd = serde_saphyr::from_str(&yaml).expect("crd yaml");
    crds.create(&PostParams::default(), &foreign)
        .await
        .expect("someone else's CRD");
    let err = install_crds(&client, &yaml).await.expect_err("must refuse");
    assert!(
        matches!(&err, ClusterError::Unsupported(m) if m.contains(&format!("widgets.{group}"))),
        "{err}"
    );
    let names = install_own_crds(&client, &yaml)
        .await
        .expect("rebound's own CRDs are updated");
    assert_eq!(names, vec![format!("widgets.{group}")]);
    let after = crds.get(&names[0]).await.expect("crd");
    assert!(
        !after
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(TESTBED_LABEL.0),
        "updated in place, still its owner's"
    );
    crds.delete(&names[0], &DeleteParams::default())
        .await
        .expect("delete the CRD");
    bed.cleanup().await;
}

e2e!(crds_are_installed_once_updated_after_and_a_real_operators_are_refused);
