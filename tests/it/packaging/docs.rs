//! The docs: the CRD reference generated from the schemas, the levels,
//! skips, CEL variables and names they cover, install commands and CEL
//! examples that work.

use super::*;

#[test]
fn crd_reference_is_generated_from_the_schemas() {
    check_generated("docs/crd-reference.md", &crd_reference());
}

/// Markdown reference of every CRD field, from the OpenAPI schemas.
fn crd_reference() -> String {
    let mut out = String::from(
        "# CRD reference\n\n<!-- Generated from the CRD schemas by tests/it/packaging.rs; do not edit.\n     Regenerate: REBOUND_BLESS=1 cargo test --test it packaging -->\n\n\
         Every field of the `rebound.dev/v1alpha1` custom resources, as the API\nserver validates them (`kubectl explain <kind>.spec` shows the same\ndescriptions). Concepts and examples: [concepts.md](concepts.md),\n[cel.md](cel.md).\n",
    );
    for crd in rebound::api::crds() {
        let v = serde_json::to_value(&crd).unwrap();
        let names = &v["spec"]["names"];
        let ver = &v["spec"]["versions"][0];
        let schema = &ver["schema"]["openAPIV3Schema"];
        out.push_str(&format!("\n## {}\n\n", names["kind"].as_str().unwrap()));
        out.push_str(&format!(
            "{}\n\n",
            one_line(schema["description"].as_str().unwrap_or(""))
        ));
        out.push_str(&format!(
            "- API version: `{}/{}`\n- Scope: {}\n- Plural: `{}`; short names: {}; category: `{}`\n",
            v["spec"]["group"].as_str().unwrap(),
            ver["name"].as_str().unwrap(),
            v["spec"]["scope"].as_str().unwrap(),
            names["plural"].as_str().unwrap(),
            names["shortNames"].as_array().unwrap().iter().map(|s| format!("`{}`", s.as_str().unwrap())).collect::<Vec<_>>().join(", "),
            names["categories"][0].as_str().unwrap(),
        ));
        let cols: Vec<String> = ver["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{} (`{}`)",
                    c["name"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap()
                )
            })
            .collect();
        out.push_str(&format!("- `kubectl get` columns: {}\n", cols.join(", ")));
        for part in ["spec", "status"] {
            let node = &schema["properties"][part];
            out.push_str(&format!(
                "\n### {}.{part}\n\n",
                names["kind"].as_str().unwrap()
            ));
            out.push_str("| field | type | required | description |\n|---|---|---|---|\n");
            fields(part, node, &mut out);
        }
    }
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn type_of(s: &Value) -> String {
    if let Some(t) = s["type"].as_str() {
        return match t {
            "array" => format!("[]{}", type_of(&s["items"])),
            "object" if s["additionalProperties"].is_object() => {
                format!("map[string]{}", type_of(&s["additionalProperties"]))
            }
            t => t.to_string(),
        };
    }
    if s["x-kubernetes-int-or-string"] == true {
        return "int-or-string".into();
    }
    "any".into()
}

fn constraints(s: &Value) -> Vec<String> {
    let mut c = Vec::new();
    if let Some(e) = s["enum"].as_array() {
        c.push(format!(
            "one of {}",
            e.iter()
                .map(|x| format!(
                    "`{}`",
                    x.as_str().map(str::to_string).unwrap_or(x.to_string())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for (k, label) in [
        ("minimum", "min"),
        ("maximum", "max"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
    ] {
        if let Some(n) = s[k].as_f64() {
            c.push(format!("{label} {n}"));
        }
    }
    if let Some(d) = s.get("default") {
        c.push(format!("default `{d}`"));
    }
    let item_rules = s["items"]["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten();
    for r in s["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(item_rules)
    {
        c.push(format!("rule: {}", r["message"].as_str().unwrap_or("")));
    }
    c
}

fn fields(path: &str, node: &Value, out: &mut String) {
    let required: BTreeSet<&str> = node["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str())
        .collect();
    let Some(props) = node["properties"].as_object() else {
        return;
    };
    for (name, child) in props {
        let p = format!("{path}.{name}");
        let mut desc = one_line(child["description"].as_str().unwrap_or(""));
        let c = constraints(child);
        if !c.is_empty() {
            if !desc.is_empty() {
                desc.push(' ');
            }
            desc.push_str(&format!("({})", one_line(&c.join("; "))));
        }
        out.push_str(&format!(
            "| `{p}` | {} | {} | {desc} |\n",
            type_of(child),
            if required.contains(name.as_str()) {
                "yes"
            } else {
                ""
            }
        ));
        if child["type"] == "array" {
            fields(&format!("{p}[]"), &child["items"], out);
        } else {
            fields(&p, child, out);
        }
    }
}

#[test]
fn docs_cover_levels_skips_cel_variables_events_and_ascend_names() {
    use rebound::fault::Level;
    let concepts = read("docs/concepts.md");
    for l in Level::ALL {
        assert!(
            concepts.contains(&format!("`{l}`")),
            "docs/concepts.md lacks level {l}"
        );
    }
    // Every skip reason the decision core can report.
    let decide = read("crates/rebound-core/src/policy/decide/outcome.rs");
    let skips = captures(
        r#"Skip::[A-Za-z]+(?: \{ \.\. \})? => "([A-Za-z]+)""#,
        &decide,
    );
    assert!(skips.len() >= 10, "{skips:?}");
    for s in &skips {
        assert!(
            concepts.contains(&format!("`{s}`")),
            "docs/concepts.md does not explain skip reason {s}"
        );
    }
    // Every field CEL sees.
    let cel = read("docs/cel.md");
    let values = read("crates/rebound-core/src/expr/values.rs");
    let keys = captures(r#"m\.insert\(\s*"([A-Za-z]+)""#, &values);
    assert!(keys.len() >= 20, "{keys:?}");
    for k in &keys {
        assert!(
            cel.contains(&format!(".{k}`")),
            "docs/cel.md does not document the CEL field `{k}`"
        );
    }
    for v in rebound::expr::POLICY_VARS {
        assert!(
            cel.contains(&format!("`{v}`")),
            "docs/cel.md lacks variable {v}"
        );
    }
    // Every Event reason the controller may write.
    let events = read("docs/events.md");
    let reasons = rebound::recover::events::reasons::ALL;
    assert!(!reasons.is_empty());
    for r in &reasons {
        assert!(
            events.contains(&format!("`{r}`")),
            "docs/events.md lacks Event reason {r}"
        );
    }
    // The Ascend table maps each ClusterD name to the level the code does.
    let ascend = read("docs/ascend.md");
    let row = regex::Regex::new(r"(?m)^\| `([A-Za-z]+)` \| `([A-Za-z]+)` \|").unwrap();
    let mut n = 0;
    for c in row.captures_iter(&ascend) {
        let level: Level = c[2].parse().unwrap();
        assert_eq!(
            Level::from_clusterd(&c[1]),
            Some(level),
            "docs/ascend.md maps {} wrongly",
            &c[1]
        );
        n += 1;
    }
    assert!(n >= 7, "docs/ascend.md has only {n} mapping rows");
}

#[test]
fn install_commands_in_docs_reference_files_that_exist() {
    let mut docs: Vec<String> = files_under("docs")
        .into_iter()
        .filter(|f| f.ends_with(".md"))
        .collect();
    if root().join("README.md").is_file() {
        docs.push("README.md".into());
    }
    let cmd = regex::Regex::new(r"(?:kubectl (?:apply|create|delete)(?: --server-side)? -[kf]|kubectl kustomize(?: --load-restrictor \S+)?|helm (?:install|upgrade(?: --install)?|template) [a-z0-9-]+) (\S+)").unwrap();
    let mut checked = 0;
    for d in &docs {
        let text = read(d);
        for c in cmd.captures_iter(&text) {
            let p = c[1].trim_end_matches(['`', ')', ',', '.']);
            if p.starts_with("http")
                || p == "-"
                || p.starts_with('<')
                || p.starts_with('$')
                || p.contains("://")
                || p.starts_with('/')
            {
                continue;
            }
            assert!(
                root().join(p).exists(),
                "{d}: `{}` names {p}, which does not exist",
                &c[0]
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 5,
        "only {checked} install commands found in the docs"
    );
}

/// docs/events.md's "Skipped restarts" table gives each skip reason the
/// Event the controller writes for it (`recover::skip_event`), and
/// `Skip::NAMES` lists every reason `Skip::name` gives.
#[test]
fn events_doc_says_which_event_each_skip_writes() {
    use rebound::policy::Skip;
    let decide = read("crates/rebound-core/src/policy/decide/outcome.rs");
    let names = captures(
        r#"Skip::[A-Za-z]+(?: \{ \.\. \})? => "([A-Za-z]+)""#,
        &decide,
    );
    let listed: BTreeSet<String> = Skip::NAMES.iter().map(|s| s.to_string()).collect();
    assert_eq!(names, listed, "Skip::NAMES and Skip::name");
    let every = [
        Skip::LevelIgnore,
        Skip::NoPolicy,
        Skip::GateFalse,
        Skip::GateError {
            error: String::new(),
        },
        Skip::ActionNone,
        Skip::RestartPolicyNever,
        Skip::Cooldown { remaining_secs: 1 },
        Skip::CooldownError {
            error: String::new(),
        },
        Skip::BudgetExhausted { used: 1, max: 1 },
        Skip::WaitingForPodRestart { remaining_secs: 1 },
        Skip::DryRun,
        Skip::BreakerOpen {
            used: 1,
            allowed: 1,
        },
        Skip::Untrusted,
        Skip::NodeActionsDisabled,
        Skip::AlreadyApplied,
        Skip::RetryLimit {
            field: String::new(),
            remaining: 0,
        },
        Skip::FinalExit { why: String::new() },
        Skip::CordonHeld {
            node: String::new(),
        },
    ];
    assert_eq!(every.len(), Skip::NAMES.len());
    let events = read("docs/events.md");
    let table = events
        .split("## Skipped restarts")
        .nth(1)
        .expect("docs/events.md has a \"Skipped restarts\" section");
    let row = regex::Regex::new(r"(?m)^\| `([A-Za-z]+)` \| (.+) \|$").unwrap();
    let rows: BTreeMap<String, String> = row
        .captures_iter(table.split("\n## ").next().unwrap_or(table))
        .map(|c| (c[1].to_string(), c[2].to_string()))
        .collect();
    for s in &every {
        let said = rows.get(s.name());
        match rebound::recover::skip_event(s) {
            Some((reason, warning)) => {
                let kind = if warning { "Warning" } else { "Normal" };
                let cell =
                    said.unwrap_or_else(|| panic!("docs/events.md: no row for {}", s.name()));
                assert!(
                    cell.starts_with(&format!("`{reason}` ({kind})")),
                    "docs/events.md says {} writes {cell:?}; it writes {reason} ({kind})",
                    s.name()
                );
            }
            None => {
                if let Some(cell) = said {
                    assert!(
                        cell.starts_with("none"),
                        "docs/events.md: {} writes no Event, not {cell:?}",
                        s.name()
                    );
                } else {
                    assert!(
                        Skip::NODE_ONLY.contains(&s.name())
                            && table.contains(&format!("`{}`", s.name())),
                        "docs/events.md does not say what {} writes",
                        s.name()
                    );
                }
            }
        }
    }
}

/// The README is for users (issue 28): one screen on what rebound does and
/// how to try it, one on installing it, under 150 lines; its figures live
/// in docs/benchmarks.md (no measurement table in the README), which it
/// links, and it has the Kubernetes version table.
#[test]
fn readme_is_short_and_its_figures_live_in_benchmarks() {
    let r = read("README.md");
    assert!(
        r.lines().count() < 150,
        "README.md has {} lines",
        r.lines().count()
    );
    for section in [
        "## Try it",
        "## Install",
        "## Configure",
        "## Observe",
        "## Which Kubernetes",
        "## Run the tests",
    ] {
        assert!(r.contains(section), "README.md lacks {section}");
    }
    assert!(r.contains("(docs/benchmarks.md)") && r.contains("(docs/README.md)"));
    assert!(
        !r.lines()
            .any(|l| l.starts_with('|') && (l.contains(" ms") || l.contains("measured"))),
        "a measurement table in README.md: it belongs in docs/benchmarks.md"
    );
}
