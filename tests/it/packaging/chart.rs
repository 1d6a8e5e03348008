//! The Helm chart: templates balanced and using existing values, the values
//! schema covering every value, and (with a helm binary) a render like
//! config/default.

use super::*;

pub(crate) fn values() -> Value {
    docs_of("chart/rebound/values.yaml").remove(0)
}

#[test]
fn chart_templates_are_balanced_and_use_existing_values_includes_and_files() {
    let values = values();
    let helpers = read("chart/rebound/templates/_helpers.tpl");
    let defined = captures(r#"define "([^"]+)""#, &helpers);
    let values_re = regex::Regex::new(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)").unwrap();
    let include_re = regex::Regex::new(r#"include "([^"]+)""#).unwrap();
    let files_re = regex::Regex::new(r#"\.Files\.(Get|Glob) "([^"]+)""#).unwrap();
    let open_re = regex::Regex::new(r"\{\{-?\s*(if|range|with|define)\b").unwrap();
    let end_re = regex::Regex::new(r"\{\{-?\s*end\s*-?\}\}").unwrap();
    let templates = files_under("chart/rebound/templates");
    assert!(templates.len() >= 10, "{templates:?}");
    let mut used_values = 0;
    for t in &templates {
        let text = read(t);
        // Actions open and close in order, never nested, never across a `---`.
        let mut rest = text.as_str();
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .unwrap_or_else(|| panic!("{t}: `{{{{` without `}}}}`"));
            let inner = &after[..close];
            assert!(
                !inner.contains("{{") && !inner.contains('\n')
                    || inner.trim_start_matches('-').trim_start().starts_with("/*"),
                "{t}: unbalanced action near {:?}",
                &inner[..inner.len().min(60)]
            );
            rest = &after[close + 2..];
        }
        assert!(!rest.contains("}}"), "{t}: `}}}}` without `{{{{`");
        // Control blocks balance.
        let opens = open_re.find_iter(&text).count();
        let ends = end_re.find_iter(&text).count();
        assert_eq!(
            opens, ends,
            "{t}: {opens} if/range/with/define but {ends} end"
        );
        for c in values_re.captures_iter(&text) {
            let path = &c[1][1..];
            let mut node = &values;
            for seg in path.split('.') {
                node = node
                    .get(seg)
                    .unwrap_or_else(|| panic!("{t} uses .Values.{path}, which values.yaml lacks"));
            }
            used_values += 1;
        }
        for c in include_re.captures_iter(&text) {
            assert!(
                defined.contains(&c[1]),
                "{t} includes undefined template {}",
                &c[1]
            );
        }
        for c in files_re.captures_iter(&text) {
            let (how, pat) = (&c[1], &c[2]);
            let hits = if how == "Get" {
                usize::from(root().join("chart/rebound").join(pat).is_file())
            } else {
                let (dir, ext) = pat.rsplit_once("/*").unwrap();
                files_under(&format!("chart/rebound/{dir}"))
                    .iter()
                    .filter(|f| f.ends_with(ext))
                    .count()
            };
            assert!(hits > 0, "{t}: .Files.{how} {pat:?} finds nothing");
        }
    }
    assert!(used_values > 40, "templates use only {used_values} values");
    // Every value is used by some template: the leaf itself, or a parent
    // used whole (`toYaml .Values.controller.resources`).
    let all_text: String = templates.iter().map(|t| read(t)).collect();
    let refs: BTreeSet<String> = values_re
        .captures_iter(&all_text)
        .map(|c| c[1].to_string())
        .collect();
    fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v.as_object() {
            Some(o) if !o.is_empty() => o
                .iter()
                .for_each(|(k, c)| leaves(&format!("{prefix}.{k}"), c, out)),
            _ => out.push(prefix.to_string()),
        }
    }
    let mut paths = Vec::new();
    leaves("", &values, &mut paths);
    for p in paths {
        let used = refs
            .iter()
            .any(|r| *r == p || p.starts_with(&format!("{r}.")));
        assert!(used, "values.yaml{p} is not used by any template");
    }
}

/// `schema` accepts `v`'s shape: every key has a schema, every type matches.
fn covers(schema: &Value, v: &Value, path: &str, problems: &mut Vec<String>) {
    let ty = schema["type"].as_str().unwrap_or("");
    let ok = match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "" => true,
        other => {
            problems.push(format!("{path}: unknown type {other}"));
            true
        }
    };
    if !ok {
        problems.push(format!("{path}: value {v} is not a {ty}"));
    }
    if let (Some(o), Some(props)) = (v.as_object(), schema["properties"].as_object()) {
        for (k, child) in o {
            match props.get(k) {
                Some(s) => covers(s, child, &format!("{path}.{k}"), problems),
                None => problems.push(format!("{path}.{k}: not in values.schema.json")),
            }
        }
    }
    if let Some(e) = schema["enum"].as_array()
        && !e.contains(v)
    {
        problems.push(format!("{path}: {v} not in {e:?}"));
    }
}

#[test]
fn values_schema_is_valid_json_and_covers_every_value() {
    let schema: Value = serde_json::from_str(&read("chart/rebound/values.schema.json"))
        .expect("values.schema.json is JSON");
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["additionalProperties"], false,
        "unknown top-level values must be rejected"
    );
    let values = values();
    let top: BTreeSet<&String> = values.as_object().unwrap().keys().collect();
    let covered: BTreeSet<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(
        top, covered,
        "top-level keys of values.yaml and values.schema.json"
    );
    let mut problems = Vec::new();
    covers(&schema, &values, "values", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
    // The schema rejects what it should (this checker, not helm, so it is a
    // check of our own walker too).
    let mut bad = values.clone();
    bad["controller"]["replicas"] = Value::String("two".into());
    bad["controller"]["logFormat"] = Value::String("xml".into());
    bad["controller"]["typo"] = Value::Bool(true);
    let mut p = Vec::new();
    covers(&schema, &bad, "values", &mut p);
    assert_eq!(p.len(), 3, "{p:#?}");
    // Defaults agree with the controller's own defaults where the chart
    // states one (maxSeparated, breakerWindow, taintKey).
    let d = rebound::policy::NodeConfig::default();
    assert_eq!(
        rebound::policy::Limit::parse(values["controller"]["maxSeparated"].as_str().unwrap()),
        Ok(d.max_separated)
    );
    assert_eq!(
        rebound::api::duration::parse(values["controller"]["breakerWindow"].as_str().unwrap()),
        Ok(d.breaker_window)
    );
    let chart = docs_of("chart/rebound/Chart.yaml").remove(0);
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart appVersion follows the crate version"
    );
}

/// Values unlike the defaults in every switch the chart has.
pub(crate) const NON_DEFAULT: &str = "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,controller.dryRun=true,crds.install=false,agent.enabled=false";

/// A helm binary: `REBOUND_HELM`, else the helm v4 that
/// tools/real-components/build built, else `helm` on PATH. In CI
/// (`REBOUND_REQUIRE_REAL_SERVER=1`) the built one must be there.
pub(crate) fn helm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REBOUND_HELM") {
        return Some(PathBuf::from(p));
    }
    let built =
        rebound_sim::components::bin(&root(), rebound_sim::components::Set::Operators, "helm");
    match built {
        Ok(p) => return Some(p),
        Err(e) if rebound_sim::envtest::real_server_required() => {
            panic!("no helm: {e}")
        }
        Err(_) => {}
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("helm"))
        .find(|p| p.is_file())
}

/// `helm lint` of the chart with `extra` values: its output on failure.
pub(super) fn helm_lint(helm: &Path, extra: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(helm)
        .args(["lint", "chart/rebound", "--strict"])
        .args(extra)
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", helm.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `helm template ARGS` from the repository root, with a helm binary;
/// `None` without one. A failed render panics with helm's message.
pub(crate) fn helm_render(args: &[&str]) -> Option<Vec<Value>> {
    let helm = helm()?;
    let out = std::process::Command::new(&helm)
        .arg("template")
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm.display()));
    assert!(
        out.status.success(),
        "helm template {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(yaml_docs(
        &String::from_utf8_lossy(&out.stdout),
        "helm template output",
    ))
}

pub(crate) fn helm_template(helm: &Path, extra: &[&str]) -> Result<Vec<Value>, String> {
    let out = std::process::Command::new(helm)
        .args([
            "template",
            "rebound",
            "chart/rebound",
            "--namespace",
            "rebound-system",
            "--kube-version",
            "1.30.0",
        ])
        .args(extra)
        .current_dir(root())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", helm.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).to_string());
    }
    Ok(yaml_docs(
        &String::from_utf8_lossy(&out.stdout),
        "helm template output",
    ))
}

/// With a helm binary (REBOUND_HELM or PATH), the chart renders, its schema
/// rejects bad values, and with default values it renders the objects of
/// `config/default` with the same rules, security settings and mounts.
/// Without one it prints a notice: the text checks above still run.
#[test]
fn helm_renders_the_chart_like_config_default() {
    let Some(helm) = helm() else {
        eprintln!(
            "notice: no helm binary (set REBOUND_HELM or put helm on PATH); chart rendering not checked"
        );
        return;
    };
    helm_lint(&helm, &[]).unwrap_or_else(|e| panic!("helm lint failed: {e}"));
    helm_lint(&helm, &["--set", NON_DEFAULT])
        .unwrap_or_else(|e| panic!("helm lint with every option failed: {e}"));
    let rendered =
        helm_template(&helm, &[]).unwrap_or_else(|e| panic!("helm template failed: {e}"));
    for d in &rendered {
        check_typed(d, &format!("helm: {} {}", d["kind"], d["metadata"]["name"]));
    }
    let config = kustomize("config/default");
    let ids = |objs: &[Value]| -> BTreeSet<(String, String)> {
        objs.iter()
            .filter(|o| o["kind"] != "Namespace")
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_string(),
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        ids(&rendered),
        ids(&config),
        "helm (release `rebound`) and config/default render different objects"
    );
    for (kind, name) in ids(&config) {
        let (h, k) = (one(&rendered, &kind, &name), one(&config, &kind, &name));
        match kind.as_str() {
            "ClusterRole" | "Role" => assert_eq!(h["rules"], k["rules"], "{kind} {name}"),
            "Deployment" | "DaemonSet" => {
                let (hp, kp) = (
                    &h["spec"]["template"]["spec"],
                    &k["spec"]["template"]["spec"],
                );
                for field in [
                    "securityContext",
                    "volumes",
                    "tolerations",
                    "serviceAccountName",
                ] {
                    assert_eq!(hp[field], kp[field], "{kind} {name}: pod {field}");
                }
                let (hc, kc) = (&hp["containers"][0], &kp["containers"][0]);
                for field in [
                    "securityContext",
                    "volumeMounts",
                    "livenessProbe",
                    "readinessProbe",
                    "resources",
                    "ports",
                ] {
                    assert_eq!(hc[field], kc[field], "{kind} {name}: container {field}");
                }
            }
            _ => {}
        }
    }
    let all_on = helm_template(&helm, &["--set", NON_DEFAULT])
        .unwrap_or_else(|e| panic!("helm template with every option failed: {e}"));
    let kinds: BTreeSet<&str> = all_on.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(
        kinds.contains("ServiceMonitor") && kinds.contains("PrometheusRule"),
        "{kinds:?}"
    );
    assert!(
        !kinds.contains("DaemonSet") && !kinds.contains("CustomResourceDefinition"),
        "{kinds:?}"
    );
    // With the agent, the monitoring options also scrape the agents and
    // alert on their sources (docs/agent.md); the agent alerts select the
    // job the PodMonitor sets.
    let with_agent = helm_template(
        &helm,
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
        ],
    )
    .unwrap_or_else(|e| panic!("helm template with monitoring and the agent failed: {e}"));
    let pod_monitor = one(&with_agent, "PodMonitor", "rebound-agent");
    let endpoint = &pod_monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "http", "{pod_monitor:#}");
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "job");
    assert_eq!(endpoint["relabelings"][0]["replacement"], "rebound-agent");
    let rule = one(&with_agent, "PrometheusRule", "rebound");
    let agent_group = rule["spec"]["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "rebound-agent"))
        .unwrap_or_else(|| panic!("no rebound-agent group: {rule:#}"));
    for r in agent_group["rules"].as_array().expect("rules") {
        let expr = r["expr"].as_str().expect("expr");
        assert!(
            expr.contains(r#"job="rebound-agent", namespace="rebound-system""#),
            "{expr}"
        );
    }
    assert!(
        !kinds.contains("PodMonitor"),
        "no PodMonitor without the agent: {kinds:?}"
    );
    let err = helm_template(&helm, &["--set", "controller.leaderElection=false"])
        .expect_err("two replicas without leader election must not render");
    assert!(err.contains("leaderElection"), "{err}");
    let err = helm_template(&helm, &["--set", "controller.logFormat=xml"])
        .expect_err("the schema must reject logFormat=xml");
    assert!(err.contains("logFormat"), "{err}");
}

/// The chart ships the dashboard (issue 32): its copy equals
/// docs/grafana-dashboard.json, and `metrics.grafanaDashboard.enabled`
/// renders a ConfigMap with the sidecar's label whose JSON is that
/// dashboard; off by default.
#[test]
fn the_chart_ships_the_dashboard_when_asked() {
    assert_eq!(
        read("chart/rebound/files/grafana-dashboard.json"),
        read("docs/grafana-dashboard.json"),
        "the chart's dashboard differs from docs/grafana-dashboard.json: copy it"
    );
    let Some(helm) = helm() else {
        eprintln!("notice: no helm binary; the dashboard ConfigMap not rendered");
        return;
    };
    let off = helm_template(&helm, &[]).expect("helm template");
    assert!(
        !off.iter()
            .any(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "rebound-dashboard")
    );
    let on = helm_template(&helm, &["--set", "metrics.grafanaDashboard.enabled=true"])
        .expect("helm template with the dashboard");
    let cm = one(&on, "ConfigMap", "rebound-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(cm["data"]["rebound.json"].as_str().expect("data"))
        .expect("the dashboard JSON");
    let docs: Value = serde_json::from_str(&read("docs/grafana-dashboard.json")).expect("JSON");
    assert_eq!(json, docs);
}
