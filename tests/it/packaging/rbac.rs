//! RBAC: each component is granted exactly what it uses, the restart
//! agent's aggregate role covers every job kind inject wires.

use super::chart::values;
use super::*;

type Grants = BTreeSet<(String, String, String)>;

fn grants(rules: &Value, what: &str) -> Grants {
    let mut g = Grants::new();
    for r in rules
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no rules"))
    {
        assert!(r["resourceNames"].is_null() || r["resourceNames"].is_array());
        for group in r["apiGroups"].as_array().unwrap() {
            for res in r["resources"].as_array().unwrap() {
                for verb in r["verbs"].as_array().unwrap() {
                    let (group, res, verb) = (
                        group.as_str().unwrap(),
                        res.as_str().unwrap(),
                        verb.as_str().unwrap(),
                    );
                    for s in [group, res, verb] {
                        assert!(!s.contains('*'), "{what}: wildcard in {group}/{res} {verb}");
                    }
                    g.insert((group.to_string(), res.to_string(), verb.to_string()));
                }
            }
        }
    }
    g
}

fn table(rows: &[(&str, &[&str], &[&str])]) -> Grants {
    let mut g = Grants::new();
    for (group, resources, verbs) in rows {
        for r in *resources {
            for v in *verbs {
                g.insert((group.to_string(), r.to_string(), v.to_string()));
            }
        }
    }
    g
}

/// What the controller uses, cluster-wide (issue text: every verb the code
/// uses and no more).
const CONTROLLER_CLUSTER: &[(&str, &[&str], &[&str])] = &[
    (
        "",
        &["pods"],
        &["get", "list", "watch", "delete", "deletecollection"],
    ),
    ("", &["pods/log"], &["get"]),
    ("", &["nodes"], &["get", "list", "watch", "patch"]),
    ("", &["events"], &["list", "watch"]),
    ("events.k8s.io", &["events"], &["create", "patch"]),
    ("", &["configmaps"], &["create"]),
    (
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        &["list", "watch"],
    ),
    (
        "rebound.dev",
        &["recoverypolicies", "faultclassifications"],
        &["get", "list", "watch"],
    ),
    (
        "rebound.dev",
        &["recoverypolicies/status", "faultclassifications/status"],
        &["patch"],
    ),
    (
        "kubeflow.org",
        &[
            "pytorchjobs",
            "tfjobs",
            "mpijobs",
            "xgboostjobs",
            "paddlejobs",
            "jaxjobs",
        ],
        &["get", "list", "watch", "patch"],
    ),
    (
        "batch.volcano.sh",
        &["jobs"],
        &["get", "list", "watch", "patch"],
    ),
    (
        "jobset.x-k8s.io",
        &["jobsets"],
        &["get", "list", "watch", "patch"],
    ),
    (
        "trainer.kubeflow.org",
        &["trainjobs"],
        &["get", "list", "watch", "patch"],
    ),
    (
        "batch",
        &["jobs"],
        &["get", "list", "watch", "patch", "delete"],
    ),
    ("bus.volcano.sh", &["commands"], &["create"]),
    (
        "resource.k8s.io",
        &["resourceslices", "resourceclaims"],
        &["list", "watch"],
    ),
    (
        "resource.k8s.io",
        &["devicetaintrules"],
        &["list", "watch", "create", "delete"],
    ),
    (
        "rbac.authorization.k8s.io",
        &["rolebindings"],
        &["list", "create", "patch", "delete"],
    ),
    ("rbac.authorization.k8s.io", &["clusterroles"], &["bind"]),
    (
        "authorization.k8s.io",
        &["subjectaccessreviews"],
        &["create"],
    ),
];
/// What the controller uses with `--rank-tables` only, cluster-wide
/// (config/rbac/controller_rank_tables_role.yaml, the chart's
/// rbac-rank-tables.yaml): not in a default install.
const CONTROLLER_RANK_TABLES: &[(&str, &[&str], &[&str])] = &[
    ("", &["configmaps"], &["list", "watch", "patch"]),
    ("apps", &["deployments"], &["list", "watch"]),
];
const CONTROLLER_KUBE_SYSTEM: &[(&str, &[&str], &[&str])] =
    &[("", &["configmaps"], &["list", "watch"])];
const CONTROLLER_ROOT_NS: &[(&str, &[&str], &[&str])] = &[
    (
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "update"],
    ),
    ("batch", &["jobs"], &["create"]),
];
const AGENT_CLUSTER: &[(&str, &[&str], &[&str])] = &[
    ("", &["nodes"], &["get"]),
    ("", &["nodes/status"], &["patch"]),
];
const AGENT_KUBE_SYSTEM: &[(&str, &[&str], &[&str])] =
    &[("events.k8s.io", &["events"], &["create", "patch"])];

/// Grants of a ServiceAccount through bindings of `kind` (ClusterRoleBinding
/// or RoleBinding), per namespace ("" for cluster-wide).
fn bound_grants(all: &[Value], sa: &str) -> BTreeMap<String, Grants> {
    let mut out: BTreeMap<String, Grants> = BTreeMap::new();
    for b in all
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let subjects = b["subjects"].as_array().unwrap();
        if !subjects.iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == "rebound-system"
        }) {
            continue;
        }
        let role = one(
            all,
            b["roleRef"]["kind"].as_str().unwrap(),
            b["roleRef"]["name"].as_str().unwrap(),
        );
        let ns = if b["kind"] == "RoleBinding" {
            b["metadata"]["namespace"].as_str().unwrap()
        } else {
            ""
        };
        let what = format!("{} {}", role["kind"], role["metadata"]["name"]);
        out.entry(ns.to_string())
            .or_default()
            .extend(grants(&role["rules"], &what));
    }
    out
}

#[test]
fn rbac_grants_exactly_what_each_component_uses() {
    let all = kustomize("config/default");
    let c = bound_grants(&all, "rebound-controller");
    assert_eq!(
        c.keys().collect::<Vec<_>>(),
        ["", "kube-system", "rebound-system"]
    );
    assert_eq!(c[""], table(CONTROLLER_CLUSTER), "controller ClusterRole");
    assert_eq!(
        c["kube-system"],
        table(CONTROLLER_KUBE_SYSTEM),
        "controller in kube-system"
    );
    assert_eq!(
        c["rebound-system"],
        table(CONTROLLER_ROOT_NS),
        "controller in the root namespace"
    );
    let a = bound_grants(&all, "rebound-agent");
    assert_eq!(a.keys().collect::<Vec<_>>(), ["", "kube-system"]);
    assert_eq!(a[""], table(AGENT_CLUSTER), "agent ClusterRole");
    assert_eq!(
        a["kube-system"],
        table(AGENT_KUBE_SYSTEM),
        "agent in kube-system"
    );
    // No wildcard and no Secrets anywhere (aggregated roles have no rules
    // of their own).
    for r in all.iter().filter(|o| {
        (o["kind"] == "ClusterRole" || o["kind"] == "Role") && o["aggregationRule"].is_null()
    }) {
        let g = grants(&r["rules"], r["metadata"]["name"].as_str().unwrap());
        assert!(
            !g.iter().any(|(_, res, _)| res == "secrets"),
            "{}",
            r["metadata"]["name"]
        );
    }
    // The chart uses the same rules.
    for (file, name) in [
        (
            "chart/rebound/files/rbac/controller-rules.yaml",
            "rebound-controller",
        ),
        ("chart/rebound/files/rbac/agent-rules.yaml", "rebound-agent"),
    ] {
        let chart = docs_of(file).remove(0);
        assert_eq!(
            chart,
            one(&all, "ClusterRole", name)["rules"],
            "{file} differs from config/rbac's {name}"
        );
    }
    let chart = read("chart/rebound/templates/rbac-controller.yaml");
    assert!(chart.contains("verbs: [list, watch]") && chart.contains("namespace: kube-system"));
    assert!(chart.contains("verbs: [get, create, update]"));
    // docs/operations.md has the table: a row per (group, resource) with its verbs.
    let ops = read("docs/operations.md");
    for (who, rows) in [
        (
            "controller",
            [
                CONTROLLER_CLUSTER,
                CONTROLLER_KUBE_SYSTEM,
                CONTROLLER_ROOT_NS,
                CONTROLLER_RANK_TABLES,
            ]
            .concat(),
        ),
        ("agent", [AGENT_CLUSTER, AGENT_KUBE_SYSTEM].concat()),
    ] {
        for (group, resources, verbs) in rows {
            for res in resources {
                let group = if group.is_empty() { "core" } else { group };
                let ok = ops.lines().any(|l| {
                    let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                    cells.len() > 5
                        && cells[1] == who
                        && cells[2] == format!("`{group}`")
                        && cells[3].split(", ").any(|r| r == format!("`{res}`"))
                        && verbs.iter().all(|v| cells[4].split(", ").any(|x| x == *v))
                });
                assert!(
                    ok,
                    "docs/operations.md has no RBAC row for the {who}: {group} {res} with {verbs:?}"
                );
            }
        }
    }
}

/// The in-pod restart agent (`rebound inject`'s sidecar): get and watch of
/// the job kinds, in the job's namespace, nothing else.
const RESTART_AGENT: &[(&str, &[&str], &[&str])] = &[
    (
        "kubeflow.org",
        &[
            "pytorchjobs",
            "tfjobs",
            "mpijobs",
            "xgboostjobs",
            "paddlejobs",
            "jaxjobs",
        ],
        &["get", "watch"],
    ),
    ("batch.volcano.sh", &["jobs"], &["get", "watch"]),
    ("jobset.x-k8s.io", &["jobsets"], &["get", "watch"]),
    ("batch", &["jobs"], &["get", "watch"]),
    ("trainer.kubeflow.org", &["trainjobs"], &["get", "watch"]),
];

/// The label that aggregates job rules into the restart agent's role.
const RESTART_AGENT_AGGREGATE: &str = "rebound.dev/aggregate-to-restart-agent";

/// `REBOUND_JOB_API` of the agent `rebound inject` adds to a document.
fn injected_job_api(mut doc: Value) -> String {
    let opts = rebound::inplace::inject::InjectOptions::default();
    rebound::inplace::inject::inject_document(&mut doc, &opts, "packaging").expect("inject");
    fn find(v: &Value) -> Option<String> {
        match v {
            Value::Object(m) => {
                if m.get("name").and_then(Value::as_str) == Some("REBOUND_JOB_API") {
                    return m.get("value").and_then(Value::as_str).map(str::to_owned);
                }
                m.values().find_map(find)
            }
            Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    find(&doc).expect("REBOUND_JOB_API")
}

#[test]
fn restart_agent_rbac_is_get_and_watch_of_every_job_kind_inject_wires() {
    use serde_json::json;
    let all = kustomize("config/default");
    let agg = one(&all, "ClusterRole", "rebound-restart-agent");
    assert_eq!(
        agg["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"][RESTART_AGENT_AGGREGATE],
        "true"
    );
    assert!(
        agg.get("rules").is_none(),
        "the control plane fills it; `rules: []` would make each apply empty it"
    );
    let jobs = one(&all, "ClusterRole", "rebound-restart-agent-jobs");
    assert_eq!(jobs["metadata"]["labels"][RESTART_AGENT_AGGREGATE], "true");
    let g = grants(&jobs["rules"], "rebound-restart-agent-jobs");
    assert_eq!(g, table(RESTART_AGENT), "restart agent rules");
    // Bound per namespace by the job owners, never cluster-wide here.
    for b in all
        .iter()
        .filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
    {
        let r = b["roleRef"]["name"].as_str().unwrap_or_default();
        assert!(!r.starts_with("rebound-restart-agent"), "config binds {r}");
    }
    // Every job API the injected agent watches is granted.
    let pod = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
    let mut docs = vec![
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
               "spec": {"tasks": [{"name": "t", "template": pod}]}}),
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
               "spec": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": pod}}}]}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"}, "spec": {"template": pod}}),
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "r"},
               "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}}}),
    ];
    for (kind, _, specs) in rebound::inplace::inject::KUBEFLOW_KINDS {
        docs.push(
            json!({"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "k"},
                         "spec": {specs: {"Worker": {"template": pod}}}}),
        );
    }
    let mut seen = BTreeSet::new();
    for d in docs {
        let api = injected_job_api(d);
        let (group, rest) = api.rsplit_once('/').map_or(("", ""), |(gv, plural)| {
            (gv.rsplit_once('/').map_or("", |(g, _)| g), plural)
        });
        for verb in ["get", "watch"] {
            assert!(
                g.contains(&(group.to_string(), rest.to_string(), verb.to_string())),
                "the agent of {api} may not {verb} it"
            );
        }
        seen.insert((group.to_string(), rest.to_string()));
    }
    let granted: BTreeSet<(String, String)> =
        g.iter().map(|(a, b, _)| (a.clone(), b.clone())).collect();
    assert_eq!(seen, granted, "no grant for a kind inject does not wire");
    // The chart: the same rules, the same aggregation, bindings of the
    // aggregated role from values.
    let chart = docs_of("chart/rebound/files/rbac/restart-agent-rules.yaml").remove(0);
    assert_eq!(chart, jobs["rules"], "chart rules differ from config/rbac");
    let t = read("chart/rebound/templates/rbac-restart-agent.yaml");
    assert!(t.contains(&format!("{RESTART_AGENT_AGGREGATE}: \"true\"")));
    assert!(t.contains(".Values.restartAgent.bindings") && t.contains("kind: RoleBinding"));
    assert!(!t.contains("ClusterRoleBinding"), "never cluster-wide");
    assert!(
        t.contains("name: {{ $name }}\nsubjects:"),
        "binds the aggregated role"
    );
    let values = values();
    assert_eq!(values["restartAgent"]["bindings"], json!([]));
    // `rebound inject`'s default image is the one the chart and config/ run.
    let chart_meta = docs_of("chart/rebound/Chart.yaml").remove(0);
    let chart_image = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap_or_default(),
        chart_meta["appVersion"].as_str().unwrap_or_default()
    );
    assert_eq!(rebound::inplace::inject::DEFAULT_IMAGE, chart_image);
    let k = docs_of("config/default/kustomization.yaml").remove(0);
    let img = &k["images"][0];
    assert_eq!(
        format!(
            "{}:{}",
            img["newName"].as_str().unwrap_or_default(),
            img["newTag"].as_str().unwrap_or_default()
        ),
        rebound::inplace::inject::DEFAULT_IMAGE
    );
    assert!(values["restartAgent"]["image"].is_string());
    assert!(read("chart/rebound/templates/NOTES.txt").contains("rebound inject --image"));
    // docs/in-place.md has the table: a row per (group, resources) with its verbs.
    let doc = read("docs/in-place.md");
    for (group, resources, verbs) in RESTART_AGENT {
        let ok = doc.lines().any(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            cells.len() > 4
                && cells[1] == format!("`{group}`")
                && resources
                    .iter()
                    .all(|r| cells[2].split(", ").any(|x| x == format!("`{r}`")))
                && cells[3] == verbs.join(", ")
        });
        assert!(
            ok,
            "docs/in-place.md has no RBAC row for {group} {resources:?}"
        );
    }
}

/// Rules by feature (issue 28): the rank tables' rules (patch any
/// ConfigMap, watch Deployments) are in neither config/default nor the
/// chart's default render, and come, exactly, with the feature: the
/// kustomize file applied beside `--rank-tables`, the chart's template
/// with `rankTables.enabled=true`.
#[test]
fn rank_table_rules_come_only_with_rank_tables() {
    let default = kustomize("config/default");
    let all = |objs: &[Value]| -> Grants {
        objs.iter()
            .filter(|o| o["kind"] == "ClusterRole" && o["aggregationRule"].is_null())
            .flat_map(|r| grants(&r["rules"], r["metadata"]["name"].as_str().unwrap_or("")))
            .collect()
    };
    let rank = table(CONTROLLER_RANK_TABLES);
    assert!(
        all(&default).is_disjoint(&rank),
        "config/default grants rank-table rules: {:?}",
        all(&default).intersection(&rank).collect::<Vec<_>>()
    );
    let file = docs_of("config/rbac/controller_rank_tables_role.yaml");
    let role = one(&file, "ClusterRole", "rebound-controller-rank-tables");
    assert_eq!(grants(&role["rules"], "rank tables"), rank);
    let binding = one(
        &file,
        "ClusterRoleBinding",
        "rebound-controller-rank-tables",
    );
    assert_eq!(binding["subjects"][0]["name"], "rebound-controller");
    let Some(helm) = super::chart::helm() else {
        eprintln!("notice: no helm binary; the chart's rank-table rules not rendered");
        return;
    };
    let off = super::chart::helm_template(&helm, &[]).expect("helm template");
    assert!(
        all(&off).is_disjoint(&rank),
        "the chart's default grants rank-table rules"
    );
    let on = super::chart::helm_template(&helm, &["--set", "rankTables.enabled=true"])
        .expect("helm template with rank tables");
    let role = one(&on, "ClusterRole", "rebound-controller-rank-tables");
    assert_eq!(grants(&role["rules"], "chart rank tables"), rank);
    let binding = one(&on, "ClusterRoleBinding", "rebound-controller-rank-tables");
    assert_eq!(binding["subjects"][0]["name"], "rebound-controller");
    let args = one(&on, "Deployment", "rebound-controller")["spec"]["template"]["spec"]
        ["containers"][0]["args"]
        .clone();
    assert!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--rank-tables=true")),
        "{args}"
    );
}
