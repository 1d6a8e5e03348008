use super::*;

fn docs(y: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(y).expect("valid YAML")
}

#[test]
fn the_policy_is_valid_yaml_of_the_admissionregistration_v1_types() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    };
    let y = policy_yaml(&InjectOptions::default()).expect("policy");
    let d = docs(&y);
    assert_eq!(d.len(), 2);
    let p: MutatingAdmissionPolicy = serde_json::from_value(d[0].clone()).expect("policy type");
    let b: MutatingAdmissionPolicyBinding =
        serde_json::from_value(d[1].clone()).expect("binding type");
    let spec = p.spec.expect("spec");
    assert_eq!(spec.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(
        b.spec.and_then(|s| s.policy_name).as_deref(),
        Some(POLICY_NAME)
    );
    let conditions: Vec<&str> = spec
        .match_conditions
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        conditions.contains(&HOST_NETWORK_CONDITION),
        "{conditions:?}"
    );
    let m = &spec.mutations.as_ref().expect("mutations")[0];
    assert_eq!(m.patch_type, "JSONPatch");
    let expr = m
        .json_patch
        .as_ref()
        .and_then(|j| j.expression.as_deref())
        .expect("json patch");
    // The agent is the one `rebound inject` adds: every owned value is there.
    for needle in [
        "name: \"rebound-restart-agent\"",
        "image: \"rebound:",
        "command: [\"rebound\", \"restart-agent\"]",
        "restartPolicy: \"Always\"",
        "action: \"RestartAllContainers\"",
        "values: [87]",
        "path: \"/barrier\", port: 9079",
        "failureThreshold: 86400",
        "name: \"REBOUND_JOB_API\", value: variables.jobApi",
        "fieldPath: \"metadata.labels['\" + variables.jobNameLabel + \"']\"",
        "name: \"POD_NAMESPACE\"",
        "name: \"POD_NAME\"",
        "runAsNonRoot: true",
        "variables.shared ? Object.spec.initContainers.resources{} : variables.guaranteed ?",
    ] {
        assert!(expr.contains(needle), "{needle} missing from {expr}");
    }
}

#[test]
fn settings_reach_the_policy_and_bad_ones_are_refused() {
    let o = InjectOptions {
        image: "reg.example/rebound:9".into(),
        exit_code: 88,
        probe_port: 9100,
    };
    let y = policy_yaml(&o).expect("policy");
    assert!(y.contains("image: \"reg.example/rebound:9\""));
    assert!(y.contains("values: [88]"));
    assert!(y.contains("containerPort == 9100"));
    assert!(y.contains("--probe-port=9100"));
    for bad in [
        InjectOptions {
            exit_code: 137,
            ..InjectOptions::default()
        },
        InjectOptions {
            probe_port: 0,
            ..InjectOptions::default()
        },
        InjectOptions {
            image: " ".into(),
            ..InjectOptions::default()
        },
    ] {
        assert!(policy_yaml(&bad).is_err(), "{bad:?}");
    }
}

#[test]
fn cel_strings_are_escaped_and_marked_variables_concatenated() {
    assert_eq!(cel_string(r#"a"b\c"#), r#""a\"b\\c""#);
    assert_eq!(
        cel_text(&format!("x['{MARK}v{MARK}']")),
        r#""x['" + variables.v + "']""#
    );
    assert_eq!(cel_text(&format!("{MARK}v{MARK}")), "variables.v");
}

#[test]
fn every_kubeflow_kind_and_every_job_name_label_is_recognised() {
    let y = policy_yaml(&InjectOptions::default()).expect("policy");
    for (kind, plural, _) in KUBEFLOW_KINDS {
        assert!(y.contains(&format!("'{kind}': '{plural}'")), "{kind}");
    }
    for l in [
        VOLCANO_JOB_NAME_LABEL,
        JOBSET_NAME_LABEL,
        KUBEFLOW_JOB_NAME_LABEL,
        BATCH_JOB_NAME_LABEL,
    ] {
        assert!(
            y.contains(&format!("'{l}' in object.metadata.labels")),
            "{l}"
        );
    }
}
