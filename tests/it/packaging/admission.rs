//! The admission policy: generated copies in config/ and the chart, and the
//! chart value that turns it off.

use super::chart::{helm, helm_template, values};
use super::*;

/// The image in the chart's copy of the admission policy, which its
/// template replaces with the agent's image.
const CHART_AGENT_IMAGE: &str = "REBOUND_AGENT_IMAGE";

/// The admission policy is generated from the code (`rebound
/// admission-policy`): config/admission/ with the default image, the chart's
/// file with a placeholder its template replaces; config/default installs it,
/// and the chart's template renders it only under `admissionPolicy.enabled`
/// (on by default), so turning the value off removes it.
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
    let objs = kustomize("config/default");
    one(&objs, "MutatingAdmissionPolicy", POLICY_NAME);
    one(&objs, "MutatingAdmissionPolicyBinding", POLICY_NAME);
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
        body.starts_with("{{- if .Values.admissionPolicy.enabled }}")
            && body.ends_with("{{- end }}"),
        "chart/rebound/templates/admission-policy.yaml: not all of it is under `if .Values.admissionPolicy.enabled`:\n{body}"
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

/// With a helm binary: the chart renders the policy with the agent's image
/// by default, and nothing of it with `admissionPolicy.enabled=false`.
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
        &["--set", "restartAgent.image=reg.example/rebound:7"],
    )
    .unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(kinds(&on).len(), 2, "policy and binding by default");
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
    let off = helm_template(&helm, &["--set", "admissionPolicy.enabled=false"])
        .unwrap_or_else(|e| panic!("helm template failed: {e}"));
    assert_eq!(
        kinds(&off),
        Vec::<String>::new(),
        "turned off: no policy, no binding"
    );
}
