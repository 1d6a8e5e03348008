//! The controller's RBAC in `config/rbac/` grants every request the
//! controller makes, and no verb it never uses: the requests come from the
//! request log while the controller restarts jobs of two kinds, saves
//! logs, cordons and uncordons a node and writes status. On a real server
//! the controller runs as a ServiceAccount bound to exactly those roles,
//! so the server's own authorization judges every request too.

use super::*;
use std::collections::BTreeSet;

/// `(namespace or None for cluster-wide, apiGroup, resource, verb)`.
type Grant = (Option<String>, String, String, String);

/// The controller's RBAC files, as text.
fn rbac_files() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/rbac");
    [
        "controller_role.yaml",
        "controller_leader_election_role.yaml",
        // The scenario runs with --rank-tables.
        "controller_rank_tables_role.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(dir.join(f)).expect("rbac file"))
    .collect()
}

/// The grants of the RBAC files, Roles' namespaces as the bed names them
/// (`rebound-system` is the run's root namespace on a shared cluster).
fn grants(bed: &Testbed) -> Vec<Grant> {
    let mut out = Vec::new();
    for text in rbac_files() {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("yaml");
        for d in docs {
            let scope = match d["kind"].as_str() {
                Some("ClusterRole") => None,
                Some("Role") => Some(match d["metadata"]["namespace"].as_str() {
                    Some("kube-system") | None => "kube-system".to_string(),
                    Some(ns) => bed.ns(ns),
                }),
                _ => continue,
            };
            for r in d["rules"].as_array().into_iter().flatten() {
                for g in r["apiGroups"].as_array().into_iter().flatten() {
                    for res in r["resources"].as_array().into_iter().flatten() {
                        for v in r["verbs"].as_array().into_iter().flatten() {
                            out.push((
                                scope.clone(),
                                g.as_str().unwrap_or_default().into(),
                                res.as_str().unwrap_or_default().into(),
                                v.as_str().unwrap_or_default().into(),
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

fn group_of(path: &str) -> Option<String> {
    if path.starts_with("/api/") {
        Some(String::new())
    } else {
        path.strip_prefix("/apis/")
            .and_then(|p| p.split('/').next())
            .map(str::to_string)
    }
}

async fn every_request_the_controller_makes_is_granted_and_every_grant_is_used(server: Server) {
    let logs = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: logs, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
  preserveLogs: {tailLines: 10}
---
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: graded, namespace: team-a}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  action: RestartPod
  cooldown: 0s
"#;
    let bed = bed(
        server,
        SimConfig {
            nodes: 4,
            ..SimConfig::default()
        },
    )
    .await;
    for ns in ["ml", "team-a", "team-b"] {
        bed.ensure_namespace(ns).await.expect("namespace");
    }
    bed.apply_yaml(BASE).await.expect("base objects");
    bed.apply_yaml(logs).await.expect("policies");
    // The agent's ClusterRole, and a binding of it that rebound applied
    // long ago in a namespace with no wired pod: the take-over's sweep
    // deletes it (list, delete).
    super::real_node_setup::agent_role(&bed).await;
    let team_b = bed.ns("team-b");
    let mut stale = rebound::inplace::agent_binding::binding(
        &team_b,
        &bed.controller_args().restart_agent_role,
        &["default".into()],
        chrono::Utc::now() - chrono::Duration::hours(1),
    );
    stale["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "rebound-e2e".into();
    let bindings =
        |ns: &str| Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(bed.client(), ns);
    bindings(&team_b)
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(stale).expect("binding"),
        )
        .await
        .expect("the stale binding");
    // On a real server: a ServiceAccount with exactly config/rbac's roles.
    let client = if bed.is_real() {
        bed.controller_client_with_rbac("rebound-controller", &rbac_files())
            .await
            .expect("ServiceAccount identity")
    } else {
        bed.controller_client().await.expect("client")
    };
    let ctl = bed
        .start_controller_as(client, args(&bed, |a| a.rank_tables = true))
        .await
        .expect("controller");
    let [ml, team_a] = ["ml", "team-a"].map(|n| bed.ns(n));
    let c = &bed.cluster;
    super::ascend_ranktable::preset_ranktable_job(&bed, &ml, "hc").await;
    c.create_pytorchjob(&ml, "pt", 1, &[OPT_IN]).await.unwrap();
    c.create_volcano_job(&ml, "vc", 2, &[OPT_IN]).await.unwrap();
    c.create_pytorchjob(&team_a, "pp", 1, &[OPT_IN])
        .await
        .unwrap();
    // A JobSet (restarted through its child Jobs) and a batch Job
    // (restarted by its pods, recorded on itself).
    c.create_jobset(&ml, "js", 1, 2, 3, &[OPT_IN])
        .await
        .unwrap();
    c.create_batch_job(&ml, "bj", 1, &[OPT_IN]).await.unwrap();
    let (js_sel, bj_sel) = (
        "jobset.sigs.k8s.io/jobset-name=js",
        "batch.kubernetes.io/job-name=bj",
    );
    wait("running", T, || async {
        (running(&bed, &ml, &format!("{PT}=pt")).await.len() >= 2
            && running(&bed, &ml, "volcano.sh/job-name=vc").await.len() >= 2
            && running(&bed, &team_a, &format!("{PT}=pp")).await.len() >= 2
            && running(&bed, &ml, js_sel).await.len() >= 2
            && !running(&bed, &ml, bj_sel).await.is_empty())
        .then_some(())
    })
    .await;
    for sel in [js_sel, bj_sel] {
        let p = running(&bed, &ml, sel).await[0].clone();
        c.fail_container(
            &ml,
            p.metadata.name.as_deref().unwrap(),
            &p.spec.as_ref().unwrap().containers[0].name,
            1,
            "Error",
        )
        .await
        .unwrap();
    }
    c.fail_container(&ml, "pt-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    c.fail_container(&team_a, "pp-worker-0", "pytorch", 1, "Error")
        .await
        .unwrap();
    let vc_pod = running(&bed, &ml, "volcano.sh/job-name=vc").await[0].clone();
    c.fail_container(
        &ml,
        vc_pod.metadata.name.as_deref().unwrap(),
        &vc_pod.spec.as_ref().unwrap().containers[0].name,
        1,
        "Error",
    )
    .await
    .unwrap();
    wait("restarts", T, || async {
        (restarts_in(&bed, &ml, PT, "pt") == 1
            && !requests(&bed, "create", "commands", "").is_empty()
            && !requests(&bed, "delete", "pods", "").is_empty()
            && !requests(&bed, "delete", "jobs", "").is_empty()
            && bed.requests().iter().any(|r| {
                by_controller(r)
                    && r.verb == "patch"
                    && r.status < 300
                    && r.path.starts_with("/apis/batch/v1/")
                    && r.name.as_deref() == Some("bj")
            }))
        .then_some(())
    })
    .await;
    // A wired job: the controller binds the agent's role in its namespace
    // (patch: server-side apply creates it); the stale one is gone.
    super::tiers_jobs::running_job(&bed, &team_a, super::tiers_jobs::Kind::Batch, 1, true).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for r in bed.requests() {
        if r.resource == "rolebindings" || r.resource == "clusterroles" {
            eprintln!(
                "DEBUG {} {} {} {}",
                r.verb,
                r.path,
                r.status,
                by_controller(&r)
            );
        }
    }
    let rb = wait("the agents' binding in team-a", T, || async {
        bindings(&team_a)
            .get(rebound::inplace::agent_binding::BINDING_NAME)
            .await
            .ok()
    })
    .await;
    assert_eq!(
        rb.subjects
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["default"]
    );
    wait("the stale binding swept", T, || async {
        bindings(&team_b)
            .get_opt(rebound::inplace::agent_binding::BINDING_NAME)
            .await
            .ok()
            .and_then(|b| b.is_none().then_some(()))
    })
    .await;
    let n = bed.cluster.node_names()[3].clone();
    xid_condition(&bed, &n, "48").await;
    wait("cordoned", T, || async {
        cordoned(&node(&bed, &n).await).then_some(())
    })
    .await;
    c.set_node_condition(
        &n,
        rebound::fault::wire::GPU_CONDITION,
        "False",
        "Healthy",
        "",
    )
    .await
    .unwrap();
    wait("uncordoned", T, || async {
        (!cordoned(&node(&bed, &n).await)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // a status flush
    every_restart_ends(&bed).await;
    ctl.shutdown().await;

    let grants = grants(&bed);
    let mut used: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut denied = Vec::new();
    let mut refused = Vec::new();
    for r in bed.requests() {
        if !by_controller(&r) || r.resource.is_empty() {
            continue;
        }
        if r.status == 403 {
            refused.push(format!("{} {}?{}", r.verb, r.path, r.query));
        }
        let Some(group) = group_of(&r.path) else {
            continue;
        };
        let resource = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        let ok = grants.iter().any(|(scope, g, res, v)| {
            g == &group
                && res == &resource
                && v == r.verb
                && scope
                    .as_ref()
                    .is_none_or(|ns| r.namespace.as_deref() == Some(ns.as_str()))
        });
        if ok {
            used.insert((group, resource, r.verb.to_string()));
        } else {
            denied.push(format!("{} {} ({} {})", r.verb, r.path, group, resource));
        }
    }
    assert!(
        denied.is_empty(),
        "requests the RBAC would refuse: {denied:#?}"
    );
    // On a real server the ServiceAccount's requests were authorized by
    // the server itself: none was refused.
    assert!(
        refused.is_empty(),
        "requests the API server refused (403): {refused:#?}"
    );
    if bed.is_real() {
        assert!(
            bed.requests()
                .iter()
                .any(|r| by_controller(r) && r.verb == "deletecollection" && r.status < 300),
            "the ServiceAccount's restarts were accepted"
        );
    }
    assert!(
        used.len() >= 15,
        "the scenario exercised too little: {used:?}"
    );
    // No more than used: for every resource the scenario wrote to, each
    // granted verb was used. Not judged: `get` (used only to re-read after
    // a 409 and to look up a Volcano job's uid), `patch` of Events
    // (the Recorder's series updates, for repeats this scenario avoids),
    // `create` of RoleBindings (never a request of its own: the API
    // server authorizes the server-side apply that makes the agents'
    // binding as a create too, which the real server checked above), and
    // `create` of batch Jobs (validation Jobs before a device returns to
    // service, in the root namespace: e2e::dra_devices makes them).
    let written: BTreeSet<(String, String)> = used
        .iter()
        .filter(|(_, _, v)| {
            matches!(
                v.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
        })
        .map(|(g, r, _)| (g.clone(), r.clone()))
        .collect();
    let unused: Vec<_> = grants
        .iter()
        .filter(|(_, g, r, _)| written.contains(&(g.clone(), r.clone())))
        .filter(|(_, g, r, v)| {
            let exempt = v == "get"
                || (g == "events.k8s.io" && v == "patch")
                || (r == "rolebindings" && v == "create")
                || (g == "batch" && r == "jobs" && v == "create");
            !exempt && !used.contains(&(g.clone(), r.clone(), v.clone()))
        })
        .collect();
    assert!(unused.is_empty(), "granted but never used: {unused:?}");
}

e2e!(every_request_the_controller_makes_is_granted_and_every_grant_is_used);

/// A binding that grants nothing (here: of a ClusterRole that does not
/// exist) is said at once, not found out by a fallback two minutes later:
/// the real API server's authorizer says the agents cannot read their job,
/// and the job gets an `AgentAccessFailed` Warning naming the account and
/// the resource. The embedded server authorizes nothing: there only the
/// binding is checked.
async fn a_binding_that_grants_nothing_is_said_at_once(server: Server) {
    let (bed, ctl) = super::bed_with_args(server, 2, "", None, |a| {
        a.restart_agent_role = "rebound-e2e-no-such-role".into();
    })
    .await;
    let ml = bed.ns("ml");
    super::tiers_jobs::running_job(&bed, &ml, super::tiers_jobs::Kind::Batch, 1, true).await;
    let binding = wait("the agents' binding", T, || async {
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(bed.client(), &ml)
            .get(rebound::inplace::agent_binding::BINDING_NAME)
            .await
            .ok()
    })
    .await;
    assert_eq!(binding.role_ref.name, "rebound-e2e-no-such-role");
    let notes = || async {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(bed.client(), &ml);
        events
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(rebound::recover::reasons::AGENT_ACCESS_FAILED))
            .filter_map(|e| e.note)
            .collect::<Vec<_>>()
    };
    if bed.is_real() {
        let n = wait("AgentAccessFailed on the job", T, || async {
            notes().await.into_iter().next()
        })
        .await;
        assert!(
            n.contains("cannot get jobs.batch") && n.contains(&format!("{ml}/default")),
            "{n}"
        );
    }
    ctl.shutdown().await;
}

e2e!(a_binding_that_grants_nothing_is_said_at_once);
