//! A PyTorchJob wired by the admission policy, on the real kubelet: the
//! training-operator v1.9 CRD prunes `restartPolicyRules` from its pod
//! templates, so `rebound inject` cannot wire it; rebound's generated
//! MutatingAdmissionPolicy, installed on the real kube-apiserver, wires
//! its pods at CREATE, and they restart in place on the real node. The
//! Kubeflow operator is the simulated one (talking to the real server, so
//! its pods go through the real admission chain); the pods are bound to
//! the real node by their template, as in real_node.rs. The controller
//! runs as a ServiceAccount with exactly the RBAC of an install path
//! (config/rbac for the PyTorchJob, the chart's default render for the
//! Volcano Job) and the agents run as their namespace's `default`
//! ServiceAccount, authorized only through the RoleBinding the controller
//! makes (issue 28): no RoleBinding is made by the test. Unlike an install,
//! the controller runs in the test process, not as the Deployment.
//!
//! Two things differ from a cluster, both from the node's host network
//! (real_node.rs): the generated policy leaves hostNetwork pods unwired
//! (their probe ports would clash), so the test's copies wire them; each
//! pod needs its own probe port, so the test installs
//! one copy of the generated policy per replica type (bound to the pods of
//! that type by the binding's `objectSelector`), each with its port; and
//! there is no kube-proxy, so each copy also tells the agent the API
//! server's loopback address (what the kubelet's `KUBERNETES_SERVICE_*`
//! variables would give it through the `kubernetes` Service).

use super::admission_policy::{PolicyCopy, agents, env_of, install_policy_copy, uninstall};
use super::real_node::{Fault, api_port, free_port, restarts_in_place_on, running_on, template};
use super::tiers::{JOB, Kind};
use super::*;
use kube::ResourceExt;
use kube::api::PostParams;
use rebound::inplace::admission::{WIRED_BY_ADMISSION, WIRED_BY_ENV};
use rebound::inplace::inject::InjectOptions;
use rebound_sim::actors::kubeflow::REPLICA_TYPE_LABEL;
use rebound_sim::cluster::install_crds;
use rebound_sim::envtest::node::{REBOUND_IMAGE, RealNode};
use serde_json::json;

/// Where the controller's rights and the agent's ClusterRoles come from:
/// the two install paths a user has.
#[derive(Clone, Copy, Debug)]
enum Install {
    /// `kubectl apply -k config/default`: config/rbac's files.
    Kustomize,
    /// `helm install rebound chart/rebound --namespace rebound-system`
    /// with default values: the chart's rendered RBAC.
    Helm,
}

/// A bed on the real server whose controller runs as a ServiceAccount
/// with exactly the controller RBAC of `install` (on a real server the
/// server authorizes every request it makes, the agents' RoleBinding
/// included), and the restart agent's ClusterRoles of `install`: nothing
/// else is granted, no RoleBinding is made by the test.
async fn bed_as_installed(install: Install, crds: &[&str]) -> (Testbed, ControllerHandle) {
    let bed = bed(
        Server::Real,
        SimConfig {
            nodes: 4,
            ..SimConfig::default()
        },
    )
    .await;
    for f in crds.iter().filter(|_| !bed.runs_real_operators()) {
        install_crds(&bed.client(), &super::admission_policy::shared_crd(f))
            .await
            .unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    for ns in ["ml", "team-a", "team-b"] {
        bed.ensure_namespace(ns).await.expect("namespace");
    }
    bed.apply_yaml(BASE).await.expect("base objects");
    bed.apply_yaml(super::tiers::TIERS).await.expect("policies");
    let (controller, agent): (Vec<String>, String) = match install {
        Install::Kustomize => {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/rbac");
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("rbac file");
            (
                vec![
                    read("controller_role.yaml"),
                    read("controller_leader_election_role.yaml"),
                ],
                read("restart_agent_role.yaml"),
            )
        }
        Install::Helm => {
            let objs = crate::packaging::helm_render(&[
                "rebound",
                "chart/rebound",
                "--namespace",
                "rebound-system",
            ])
            .expect("a helm binary (the real components build one)");
            let of = |component: &str| -> String {
                objs.iter()
                    .filter(|o| {
                        o["kind"].as_str().is_some_and(|k| {
                            ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
                                .contains(&k)
                        }) && o["metadata"]["labels"]["app.kubernetes.io/component"] == component
                    })
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            };
            (vec![of("controller")], of("restart-agent"))
        }
    };
    rebound_sim::testbed::install_cluster_roles(&bed.client(), &agent, "rebound-e2e")
        .await
        .expect("the agent's ClusterRoles");
    let client = bed
        .controller_client_with_rbac("rebound-controller", &controller)
        .await
        .expect("the controller's ServiceAccount");
    let ctl = bed
        .start_controller_as(client, bed.controller_args())
        .await
        .expect("controller");
    (bed, ctl)
}

/// Installs one copy of the generated policy per value of `label` (each
/// pod's own probe port on the host network), agents pointed at the API
/// server's loopback address.
async fn install_copies(
    bed: &Testbed,
    ml: &str,
    label: &'static str,
    values: &[&'static str],
) -> Vec<String> {
    let mut policies = Vec::new();
    for value in values {
        let copy = PolicyCopy {
            opts: InjectOptions {
                image: REBOUND_IMAGE.into(),
                probe_port: free_port(),
                ..InjectOptions::default()
            },
            only: Some((label, value)),
            agent_env: vec![
                ("KUBERNETES_SERVICE_HOST", "127.0.0.1".into()),
                ("KUBERNETES_SERVICE_PORT", api_port()),
            ],
            host_network: true,
        };
        policies.push(install_policy_copy(bed, ml, &copy).await);
    }
    policies
}

/// Creates `job` (of `kind`, its templates not wired), waits for its
/// `pods` pods wired at admission on the real node, and checks they
/// restart in place after an XID 13, the operator's and rebound's.
async fn wired_at_admission_restarts_in_place(
    node: &'static RealNode,
    bed: Testbed,
    ctl: ControllerHandle,
    kind: Kind,
    job: serde_json::Value,
    pods: usize,
    policies: Vec<String>,
) {
    let ml = job["metadata"]["namespace"]
        .as_str()
        .expect("namespace")
        .to_owned();
    let obj: DynamicObject = serde_json::from_value(job).expect("job object");
    Api::<DynamicObject>::namespaced_with(bed.client(), &ml, &kind.resource())
        .create(&PostParams::default(), &obj)
        .await
        .expect("create the job");
    let running = running_on(&bed, &ml, kind, pods, node).await;
    let api = kind.resource();
    for p in &running {
        let a = agents(p);
        assert_eq!(a.len(), 1, "{}: wired once, at admission", p.name_any());
        assert_eq!(
            env_of(&a[0], WIRED_BY_ENV).as_deref(),
            Some(WIRED_BY_ADMISSION)
        );
        assert_eq!(
            env_of(&a[0], "REBOUND_JOB_API"),
            Some(format!("{}/{}", api.api_version, api.plural))
        );
    }
    let fault = Fault {
        xid: "13",
        second: None,
        cut: None,
    };
    restarts_in_place_on(node, &bed, &ml, kind, pods, fault).await;
    // The operator took no part: its job is not failed (the same pods and
    // their restart counts were checked above).
    let job = Api::<DynamicObject>::namespaced_with(bed.client(), &ml, &api)
        .get(JOB)
        .await
        .expect("the job");
    let status = &job.data["status"];
    let failed = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Failed" && c["status"] == "True")
        || ["Failed", "Aborted", "Terminated"]
            .iter()
            .any(|p| status["state"]["phase"] == *p);
    assert!(!failed, "the operator failed the job: {status}");
    let notes = restarted_notes(&bed, &ml).await;
    assert!(
        notes.iter().any(|n| n.contains("wired at admission")),
        "{notes:?}"
    );
    // The agents read their job through the binding the controller made
    // for the namespace's ServiceAccount.
    let rb = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(bed.client(), &ml)
        .get(rebound::inplace::agent_binding::BINDING_NAME)
        .await
        .expect("the controller's binding");
    let subjects: Vec<String> = rb
        .subjects
        .iter()
        .flatten()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(subjects, ["default"]);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
    for p in &policies {
        uninstall(&bed, p).await;
    }
}

async fn a_pytorchjob_wired_at_admission_restarts_in_place_on_a_real_kubelet(
    node: &'static RealNode,
) {
    // Installed as `kubectl apply -k config/default` installs it: the
    // controller may do what config/rbac grants, no RoleBinding is made
    // here (the controller binds the agents' role).
    let (bed, ctl) = bed_as_installed(
        Install::Kustomize,
        &["kubeflow-training-v1/kubeflow.org_pytorchjobs.yaml"],
    )
    .await;
    let ml = bed.ns("ml");
    let policies = install_copies(&bed, &ml, REPLICA_TYPE_LABEL, &["master", "worker"]).await;
    // Not wired: the template is the job's own, as its user wrote it, its
    // container named `pytorch` as the real training-operator requires.
    // On the node's host network each replica names its own
    // `pytorchjob-port` (the real training-operator gives both 23456
    // otherwise, and the kubelet refuses the second pod: NodePorts).
    let replica = || {
        let mut pod = template(node.name(), "OnFailure");
        pod["spec"]["containers"][0]["name"] = json!("pytorch");
        pod["spec"]["containers"][0]["ports"] =
            json!([{"name": "pytorchjob-port", "containerPort": free_port()}]);
        json!({"replicas": 1, "restartPolicy": "OnFailure", "template": pod})
    };
    let job = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": JOB, "namespace": ml, "labels": {OPT_IN.0: OPT_IN.1}},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                 "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    });
    wired_at_admission_restarts_in_place(node, bed, ctl, Kind::PyTorch, job, 2, policies).await;
}

/// The same for a Volcano Job through the real vc-controller-manager (its
/// PodGroup admitted by the real vc-scheduler): one task per pod, each
/// wired by its own policy copy.
async fn a_volcano_job_wired_at_admission_restarts_in_place_on_a_real_kubelet(
    node: &'static RealNode,
) {
    // Installed as `helm install` with default values installs it.
    let (bed, ctl) = bed_as_installed(Install::Helm, &[]).await;
    let ml = bed.ns("ml");
    let policies = install_copies(&bed, &ml, "volcano.sh/task-spec", &["w0", "w1"]).await;
    let tasks: Vec<serde_json::Value> = ["w0", "w1"]
        .iter()
        .map(|t| {
            let mut pod = template(node.name(), "Never");
            pod["metadata"]["name"] = json!(t);
            json!({"name": t, "replicas": 1, "template": pod})
        })
        .collect();
    let job = json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": JOB, "namespace": ml, "labels": {OPT_IN.0: OPT_IN.1}},
        "spec": {"schedulerName": "volcano", "queue": "default", "minAvailable": 2, "tasks": tasks},
    });
    wired_at_admission_restarts_in_place(node, bed, ctl, Kind::Volcano, job, 2, policies).await;
}

real_node!(a_pytorchjob_wired_at_admission_restarts_in_place_on_a_real_kubelet);
real_node!(a_volcano_job_wired_at_admission_restarts_in_place_on_a_real_kubelet);
