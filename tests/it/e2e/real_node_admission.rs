//! A PyTorchJob wired by the admission policy, on the real kubelet: the
//! training-operator v1.9 CRD prunes `restartPolicyRules` from its pod
//! templates, so `rebound inject` cannot wire it; rebound's generated
//! MutatingAdmissionPolicy, installed on the real kube-apiserver, wires
//! its pods at CREATE, and they restart in place on the real node. The
//! Kubeflow operator is the simulated one (talking to the real server, so
//! its pods go through the real admission chain); the pods are bound to
//! the real node by their template, as in real_node.rs.
//!
//! Two things differ from a cluster, both from the node's host network
//! (real_node.rs): each pod needs its own probe port, so the test installs
//! one copy of the generated policy per replica type (bound to the pods of
//! that type by the binding's `objectSelector`), each with its port; and
//! there is no kube-proxy, so each copy also tells the agent the API
//! server's loopback address (what the kubelet's `KUBERNETES_SERVICE_*`
//! variables would give it through the `kubernetes` Service).

use super::admission::bed_with_real_crds;
use super::admission_policy::{PolicyCopy, agents, env_of, install_policy_copy, uninstall};
use super::real_node::{Fault, api_port, free_port, restarts_in_place_on, running_on, template};
use super::real_node_setup::agent_rbac;
use super::tiers::{JOB, Kind};
use super::*;
use kube::ResourceExt;
use kube::api::PostParams;
use rebound::inplace::admission::{WIRED_BY_ADMISSION, WIRED_BY_ENV};
use rebound::inplace::inject::InjectOptions;
use rebound_sim::actors::kubeflow::REPLICA_TYPE_LABEL;
use rebound_sim::envtest::node::{REBOUND_IMAGE, RealNode};
use serde_json::json;

async fn a_pytorchjob_wired_at_admission_restarts_in_place_on_a_real_kubelet(
    node: &'static RealNode,
) {
    let (bed, ctl) = bed_with_real_crds(
        Server::Real,
        &["kubeflow-training-v1/kubeflow.org_pytorchjobs.yaml"],
    )
    .await;
    let ml = bed.ns("ml");
    agent_rbac(&bed, &ml).await;
    let mut policies = Vec::new();
    for replica in ["master", "worker"] {
        let copy = PolicyCopy {
            opts: InjectOptions {
                image: REBOUND_IMAGE.into(),
                probe_port: free_port(),
                ..InjectOptions::default()
            },
            only: Some((REPLICA_TYPE_LABEL, replica)),
            agent_env: vec![
                ("KUBERNETES_SERVICE_HOST", "127.0.0.1".into()),
                ("KUBERNETES_SERVICE_PORT", api_port()),
            ],
        };
        policies.push(install_policy_copy(&bed, &ml, &copy).await);
    }
    // Not wired: the template is the job's own, as its user wrote it, its
    // container named `pytorch` as the real training-operator requires.
    let mut pod = template(node.name(), "OnFailure");
    pod["spec"]["containers"][0]["name"] = json!("pytorch");
    let replica = json!({"replicas": 1, "restartPolicy": "OnFailure", "template": pod});
    let job = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": JOB, "namespace": ml, "labels": {OPT_IN.0: OPT_IN.1}},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                 "pytorchReplicaSpecs": {"Master": replica, "Worker": replica}},
    });
    let obj: DynamicObject = serde_json::from_value(job).expect("job object");
    Api::<DynamicObject>::namespaced_with(bed.client(), &ml, &Kind::PyTorch.resource())
        .create(&PostParams::default(), &obj)
        .await
        .expect("create the PyTorchJob");
    let pods = running_on(&bed, &ml, Kind::PyTorch, 2, node).await;
    for p in &pods {
        let a = agents(p);
        assert_eq!(a.len(), 1, "{}: wired once, at admission", p.name_any());
        assert_eq!(
            env_of(&a[0], WIRED_BY_ENV).as_deref(),
            Some(WIRED_BY_ADMISSION)
        );
        assert_eq!(
            env_of(&a[0], "REBOUND_JOB_API").as_deref(),
            Some("kubeflow.org/v1/pytorchjobs")
        );
    }
    let fault = Fault {
        xid: "13",
        second: None,
        cut: None,
    };
    restarts_in_place_on(node, &bed, &ml, Kind::PyTorch, 2, fault).await;
    let notes = restarted_notes(&bed, &ml).await;
    assert!(
        notes.iter().any(|n| n.contains("wired at admission")),
        "{notes:?}"
    );
    ctl.shutdown().await;
    for p in &policies {
        uninstall(&bed, p).await;
    }
}

real_node!(a_pytorchjob_wired_at_admission_restarts_in_place_on_a_real_kubelet);
