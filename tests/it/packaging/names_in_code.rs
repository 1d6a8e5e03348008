//! Flags, environment variables and metrics named in manifests, docs,
//! alerts and the dashboard exist in the code.

use super::*;

/// Long flags and environment variables of a clap `Args` struct.
fn clap_surface<A: clap::Args>() -> (BTreeSet<String>, BTreeSet<String>) {
    let cmd = A::augment_args(clap::Command::new("rebound"));
    let flags = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(str::to_string)
        .collect();
    let envs = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().to_string())
        .collect();
    (flags, envs)
}

fn flags_in(text: &str) -> BTreeSet<String> {
    captures(r"- --([a-z][a-z0-9-]*)", text)
}

fn rebound_envs_in(text: &str) -> BTreeSet<String> {
    captures(r"name: (REBOUND_[A-Z0-9_]+)", text)
}

/// Every `--flag` and `REBOUND_*` variable the manifests pass exists on the
/// subcommand they run, so a renamed flag cannot crash-loop the pods.
#[test]
fn manifest_flags_and_env_exist_in_the_code() {
    let controller = clap_surface::<rebound::controller::ControllerArgs>();
    let agent = clap_surface::<rebound::agent::args::AgentArgs>();
    for (component, (flags, envs), manifests) in [
        (
            "controller",
            controller,
            [
                "config/manager/deployment.yaml",
                "chart/rebound/templates/deployment.yaml",
            ],
        ),
        (
            "agent",
            agent,
            [
                "config/agent/daemonset.yaml",
                "chart/rebound/templates/daemonset.yaml",
            ],
        ),
    ] {
        for m in manifests {
            let text = read(m);
            for f in flags_in(&text) {
                assert!(
                    flags.contains(&f),
                    "{m} passes --{f}, which `rebound {component}` does not have"
                );
            }
            for e in rebound_envs_in(&text) {
                assert!(
                    envs.contains(&e),
                    "{m} sets {e}, which `rebound {component}` does not read"
                );
            }
            if component == "agent" {
                // The downward-API variables the agent relies on.
                assert!(
                    envs.contains("NODE_NAME") && text.contains("name: NODE_NAME"),
                    "{m}: NODE_NAME"
                );
            }
        }
    }
    // The chart passes the flags its values stand for.
    let chart = flags_in(&read("chart/rebound/templates/deployment.yaml"));
    for f in [
        "root-namespace",
        "qps",
        "burst",
        "max-separated",
        "breaker-window",
        "taint-key",
        "condition-types",
        "dry-run",
        "log-format",
    ] {
        assert!(chart.contains(f), "the chart never passes --{f}");
    }
}

fn metric_refs(text: &str) -> BTreeSet<String> {
    regex::Regex::new(r"\brebound_[a-z0-9_]+")
        .unwrap()
        .find_iter(text)
        .map(|m| {
            let s = m.as_str();
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(base) = s.strip_suffix(suffix) {
                    return base.to_string();
                }
            }
            s.to_string()
        })
        .collect()
}

#[test]
fn metrics_docs_alerts_and_dashboard_name_real_metrics() {
    let names: Vec<String> = rebound::controller::metrics::NAMES
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let docs = read("docs/metrics.md");
    for n in &names {
        assert!(
            docs.contains(&format!("`{n}`")),
            "docs/metrics.md does not document {n}"
        );
    }
    // The node agent exports its own (rebound_agent_*), documented with it
    // in docs/agent.md; docs/metrics.md and the alerts may name them too.
    let agent: Vec<String> = rebound::agent::metrics::NAMES
        .iter()
        .map(|n| n.to_string())
        .collect();
    let agent_docs = read("docs/agent.md");
    for n in &agent {
        assert!(
            agent_docs.contains(&format!("`{n}`")),
            "docs/agent.md does not document {n}"
        );
    }
    for r in metric_refs(&agent_docs) {
        assert!(
            agent.contains(&r),
            "docs/agent.md names {r}, which the agent does not export"
        );
    }
    let dashboard: Value =
        serde_json::from_str(&read("docs/grafana-dashboard.json")).expect("dashboard JSON");
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() >= 5));
    for (what, text) in [
        ("docs/metrics.md", docs.clone()),
        (
            "chart/rebound/templates/prometheusrule.yaml",
            read("chart/rebound/templates/prometheusrule.yaml"),
        ),
        (
            "docs/grafana-dashboard.json",
            read("docs/grafana-dashboard.json"),
        ),
        ("docs/operations.md", read("docs/operations.md")),
    ] {
        let refs = metric_refs(&text);
        assert!(!refs.is_empty(), "{what} names no metric");
        for r in refs {
            assert!(
                names.contains(&r) || agent.contains(&r),
                "{what} names {r}, which neither the controller nor the agent exports"
            );
        }
    }
    let rules = read("chart/rebound/templates/prometheusrule.yaml");
    for alert in [
        "ReboundBreakerOpen",
        "ReboundRestartBudgetExhausted",
        "ReboundCelErrors",
        "ReboundJobNotResumed",
        "ReboundCoreStepStuck",
        "ReboundCoreStepSlow",
        "ReboundAgentAccessFailed",
        "ReboundNoLeader",
        "ReboundAgentSourceFailing",
        "ReboundAgentSourceFlapping",
    ] {
        assert!(
            rules.contains(&format!("alert: {alert}")),
            "missing alert {alert}"
        );
    }
    // The budget alert keys on the skip reason the decision core reports.
    assert!(rules.contains(&format!(
        "outcome=\"{}\"",
        rebound::policy::Skip::BudgetExhausted { used: 0, max: 0 }.name()
    )));
}
