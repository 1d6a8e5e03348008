//! The admission policy: generated copies in config/ and the chart, and the
//! chart value that turns it off.

use super::chart::{helm, helm_template, values};
use super::*;

/// The image in the chart's copy of the admission policy, which its
/// template replaces with the agent's image.
const CHART_AGENT_IMAGE: &str = "REBOUND_AGENT_IMAGE";

/// The admission policy is generated from the code (`rebound
/// admission-policy`): config/admission/ with the default image, the chart's
/// file with a placeholder its template replaces; config/with-admission-policy
/// installs it (config/default does not: Kubernetes before 1.36 refuses it),
/// and the chart's template renders it only under `rebound.admissionPolicy`
/// (admissionPolicy.enabled, on by default, and a server that serves the
/// kind), so turning the value off removes it.
#[test]
fn admission_policy_copies_equal_the_generated_policy_and_the_chart_value_turns_it_off() {
    use rebound::inplace::admission::{POLICY_NAME, policy_yaml};
    use rebound::inplace::inject::InjectOptions;
    let config = policy_yaml(&InjectOptions::default()).expect("policy");
    check_generated("config/admission/restart_agent_policy.yaml", &config);
    let chart = policy_yaml(&InjectOptions {
        image: CHART_AGENT_IMAGE.into(),
        ..InjectOptions::default()
    })
    .expect("policy");
    check_generated(
        "chart/rebound/files/admission/restart-agent-policy.yaml",
        &chart,
    );
    let objs = kustomize("config/with-admission-policy");
    one(&objs, "MutatingAdmissionPolicy", POLICY_NAME);
    one(&objs, "MutatingAdmissionPolicyBinding", POLICY_NAME);
    assert!(
        !kustomize("config/default").iter().any(|o| o["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("MutatingAdmission"))),
        "config/default must install on Kubernetes before 1.36"
    );
    // The agent's image in config/ is the image config/default runs
    // (kustomize's `images:` cannot rewrite it inside CEL).
    let k = docs_of("config/default/kustomization.yaml").remove(0);
    let img = &k["images"][0];
    let image = format!(
        "{}:{}",
        img["newName"].as_str().expect("newName"),
        img["newTag"].as_str().expect("newTag")
    );
    assert!(
        config.contains(&format!("image: \"{image}\"")),
        "config/admission's agent image is not {image}, the image config/default runs"
    );
    // The template: a comment, then everything inside one guard.
    let t = read("chart/rebound/templates/admission-policy.yaml");
    let body = t.split_once("*/ -}}").map_or(t.as_str(), |(_, b)| b).trim();
    assert!(
        body.starts_with(r#"{{- if include "rebound.admissionPolicy" . }}"#)
            && body.ends_with("{{- end }}"),
        "chart/rebound/templates/admission-policy.yaml: not all of it is under `if include \"rebound.admissionPolicy\"`:\n{body}"
    );
    let helpers = read("chart/rebound/templates/_helpers.tpl");
    assert!(
        helpers.contains(&format!(r#".Capabilities.APIVersions.Has "{MAP_KIND}""#))
            && helpers.contains(".Values.admissionPolicy.enabled"),
        "rebound.admissionPolicy asks the server for {MAP_KIND} and the value"
    );
    assert_eq!(
        body.matches("{{- end }}").count(),
        1,
        "one guard, closed at the end"
    );
    assert!(
        body.contains(&format!(
            r#".Files.Get "files/admission/restart-agent-policy.yaml" | replace "\"{CHART_AGENT_IMAGE}\"""#
        )),
        "the template replaces the placeholder image of the generated file"
    );
    assert_eq!(
        chart.matches(&format!("\"{CHART_AGENT_IMAGE}\"")).count(),
        1,
        "the placeholder occurs once, as the agent's image"
    );
    assert_eq!(
        values()["admissionPolicy"]["enabled"],
        true,
        "on by default"
    );
}

/// The API version and kind of the policy, as helm's capabilities name it.
const MAP_KIND: &str = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy";

/// With a helm binary: the chart renders the policy with the agent's image
/// where the server serves the kind, nothing of it where it does not (a
/// server before 1.36, `helm template` told nothing) or with
/// `admissionPolicy.enabled=false`.
#[test]
fn helm_renders_the_admission_policy_only_when_enabled() {
    let Some(helm) = helm() else {
        eprintln!(
            "notice: no helm binary (set REBOUND_HELM or put helm on PATH); the admission policy's guard is checked as text only"
        );
        return;
    };
    let kinds = |objs: &[Value]| -> Vec<String> {
        objs.iter()
            .filter_map(|o| o["kind"].as_str())
            .filter(|k| k.starts_with("MutatingAdmissionPolicy"))
            .map(str::to_owned)
            .collect()
    };
    let on = helm_template(
        &helm,
        &[
            "--set",
            "restartAgent.image=reg.example/rebound:7",
            "--api-versions",
            MAP_KIND,
        ],
    )
    .unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(
        kinds(&on).len(),
        2,
        "policy and binding where the server serves them"
    );
    let old = helm_template(&helm, &[]).unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(
        kinds(&old),
        Vec::<String>::new(),
        "a server that does not serve {MAP_KIND}: no policy"
    );
    let policy = on
        .iter()
        .find(|o| o["kind"] == "MutatingAdmissionPolicy")
        .expect("policy");
    assert!(
        policy
            .to_string()
            .contains(r#"image: \"reg.example/rebound:7\""#),
        "the agent's image is restartAgent.image"
    );
    let off = helm_template(
        &helm,
        &[
            "--set",
            "admissionPolicy.enabled=false",
            "--api-versions",
            MAP_KIND,
        ],
    )
    .unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(
        kinds(&off),
        Vec::<String>::new(),
        "turned off: no policy, no binding"
    );
}

/// The Kubernetes minor version that first serves each kind the install
/// paths hold (GA or on by default).
const SERVED_SINCE: &[(&str, &str, u32)] = &[
    ("v1", "*", 0),
    ("apps/v1", "*", 9),
    ("rbac.authorization.k8s.io/v1", "*", 8),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition", 16),
    ("policy/v1", "PodDisruptionBudget", 21),
    (
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicy",
        36,
    ),
    (
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicyBinding",
        36,
    ),
];

/// The newest minor version any object of `objs` needs.
fn needs(objs: &[Value], what: &str) -> u32 {
    objs.iter()
        .map(|o| {
            let (api, kind) = (o["apiVersion"].as_str().unwrap_or(""), o["kind"].as_str().unwrap_or(""));
            SERVED_SINCE
                .iter()
                .find(|(a, k, _)| *a == api && (*k == "*" || *k == kind))
                .unwrap_or_else(|| panic!("{what}: {api} {kind} is not in SERVED_SINCE: add the version that serves it"))
                .2
        })
        .max()
        .unwrap_or(0)
}

/// The install paths work on the Kubernetes versions the docs name:
/// getting-started's minimum (and the chart's `kubeVersion`) serves every
/// object of config/default and of the chart's default render; the
/// admission overlay needs 1.36, as the docs say.
#[test]
fn install_paths_hold_only_what_the_documented_kubernetes_versions_serve() {
    let gs = read("docs/getting-started.md");
    let min: u32 = regex::Regex::new(r"You need Kubernetes 1\.(\d+) or newer")
        .unwrap()
        .captures(&gs)
        .expect("getting-started names the oldest Kubernetes")[1]
        .parse()
        .unwrap();
    let chart = docs_of("chart/rebound/Chart.yaml").remove(0);
    assert_eq!(
        chart["kubeVersion"].as_str(),
        Some(format!(">=1.{min}.0-0").as_str()),
        "Chart.yaml's kubeVersion and getting-started's minimum"
    );
    let default = kustomize("config/default");
    assert!(
        needs(&default, "config/default") <= min,
        "config/default holds an object Kubernetes 1.{min} does not serve"
    );
    // CRD validation rules (x-kubernetes-validations) are on by default from 1.25.
    if read("crds/recoverypolicies.rebound.dev.yaml").contains("x-kubernetes-validations")
        || read("crds/faultclassifications.rebound.dev.yaml").contains("x-kubernetes-validations")
    {
        assert!(min >= 25, "CRD validation rules need 1.25");
    }
    let overlay = kustomize("config/with-admission-policy");
    let since = needs(&overlay, "config/with-admission-policy");
    assert_eq!(since, 36);
    assert!(
        gs.contains("| 1.36 and later |") && gs.contains("`config/with-admission-policy`"),
        "getting-started says which version the admission policy needs"
    );
    if let Some(helm) = helm() {
        let rendered = helm_template(&helm, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            needs(&rendered, "the chart") <= min,
            "the chart's default render on 1.{min}"
        );
        let with =
            helm_template(&helm, &["--api-versions", MAP_KIND]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(needs(&with, "the chart on 1.36"), 36);
    }
}
