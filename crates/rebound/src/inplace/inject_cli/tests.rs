use super::*;
use crate::inplace::AGENT_CONTAINER;

const INJECT: Mode = Mode::Inject {
    ignore_unsupported: false,
};

fn docs(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("output parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

const STREAM: &str = "\
# a comment that stays
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}   # and this one
data: {on: \"yes\"}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: worker
        image: \"y\"
        env: [{name: MODE, value: \"on\"}]
---
apiVersion: v1
kind: Service
metadata: {name: svc}
";

#[test]
fn the_same_documents_come_out_in_order_untouched_ones_byte_for_byte() {
    let out = inject_text(STREAM, "s.yaml", &InjectOptions::default(), INJECT).expect("inject");
    assert_eq!((out.templates, out.changed), (1, 1));
    let parts: Vec<&str> = out.yaml.split("---\n").collect();
    assert_eq!(parts.len(), 3);
    assert!(parts[0].starts_with("# a comment that stays\n"));
    assert!(parts[0].contains("# and this one"));
    assert_eq!(
        parts[2],
        "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\n"
    );
    let d = docs(&out.yaml);
    assert_eq!(d.len(), 3);
    assert_eq!(d[0]["kind"], "ConfigMap");
    assert_eq!(d[2]["kind"], "Service");
    let spec = &d[1]["spec"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0]["name"], AGENT_CONTAINER);
    // Strings that YAML 1.1 readers (kubectl) would take for booleans stay strings.
    assert_eq!(spec["containers"][0]["image"], "y");
    assert_eq!(spec["containers"][0]["env"][0]["value"], "on");
    assert!(
        parts[1].contains("'y'") || parts[1].contains("\"y\""),
        "{}",
        parts[1]
    );
    // The wired document is the input plus the agent, nothing else.
    let mut input = docs(STREAM)[1].clone();
    let mut wired = d[1].clone();
    assert_eq!(uninject_document(&mut wired), 1);
    input["spec"]["template"]["spec"]
        .as_object_mut()
        .map(|m| m.remove("initContainers"));
    assert_eq!(wired, input);
}

#[test]
fn a_second_pass_changes_nothing_byte_for_byte() {
    let once = inject_text(STREAM, "s", &InjectOptions::default(), INJECT).expect("once");
    let twice = inject_text(&once.yaml, "s", &InjectOptions::default(), INJECT).expect("twice");
    assert_eq!(twice.changed, 0);
    assert_eq!(twice.templates, 1);
    assert_eq!(twice.yaml, once.yaml);
    let un =
        inject_text(&once.yaml, "s", &InjectOptions::default(), Mode::Uninject).expect("uninject");
    assert_eq!(un.templates, 1);
    assert_eq!(docs(&un.yaml), docs(STREAM));
}

#[test]
fn markers_comments_lists_and_empty_documents() {
    let text = "---\n# only a comment\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: batch/v1\n  kind: Job\n  metadata: {name: a}\n  spec: {template: {spec: {containers: [{name: c, image: i}]}}}\n...\n---\n";
    let out = inject_text(text, "l", &InjectOptions::default(), INJECT).expect("inject");
    assert_eq!(out.templates, 1);
    let d = docs(&out.yaml);
    assert_eq!(d.len(), 1);
    assert_eq!(
        d[0]["items"][0]["spec"]["template"]["spec"]["initContainers"][0]["name"],
        AGENT_CONTAINER
    );
    assert!(
        out.yaml.starts_with("---\n# only a comment\n---\n"),
        "{}",
        out.yaml
    );
    assert_eq!(split_documents("a: 1\n--- {b: 2}\n").len(), 2);
    assert_eq!(split_documents("a: '---'\nb: |\n  ---\n").len(), 1);
}

#[test]
fn a_refusal_fails_the_whole_stream_unless_ignored() {
    let bad = format!(
        "{STREAM}---\napiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {{name: js, namespace: ml}}\nspec:\n  replicatedJobs:\n  - name: w\n    template:\n      spec:\n        template:\n          spec:\n            containers:\n            - name: {AGENT_CONTAINER}\n              image: i\n"
    );
    let e = inject_text(&bad, "bad.yaml", &InjectOptions::default(), INJECT).expect_err("refused");
    let msg = e.to_string();
    assert!(
            msg.starts_with("bad.yaml document 4 (JobSet ml/js): spec.replicatedJobs[0].template.spec.template.spec.containers[0].name: "),
            "{msg}"
        );
    let out = inject_text(
        &bad,
        "bad.yaml",
        &InjectOptions::default(),
        Mode::Inject {
            ignore_unsupported: true,
        },
    )
    .expect("ignored");
    assert_eq!(out.changed, 1);
    assert!(out.warnings.iter().any(|w| w.contains("written unchanged")));
    assert!(out.yaml.ends_with(&format!(
        "            - name: {AGENT_CONTAINER}\n              image: i\n"
    )));
}

#[test]
fn a_kind_caveat_is_said_once() {
    let pt = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: NAME}\nspec: {pytorchReplicaSpecs: {Worker: {template: {spec: {containers: [{name: c, image: i}]}}}}}\n";
    let text = format!(
        "{}---\n{}",
        pt.replace("NAME", "a"),
        pt.replace("NAME", "b")
    );
    let out = inject_text(&text, "p", &InjectOptions::default(), INJECT).expect("inject");
    assert_eq!(out.templates, 2);
    assert_eq!(out.caveats.len(), 1, "{:?}", out.caveats);
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
}

#[test]
fn invalid_yaml_and_bad_options_are_errors() {
    let e = inject_text(
        "a: 1\n---\na: [\n",
        "x.yaml",
        &InjectOptions::default(),
        INJECT,
    )
    .expect_err("yaml");
    assert!(
        e.to_string().starts_with("x.yaml document 2: invalid YAML"),
        "{e}"
    );
    let bad = InjectOptions {
        exit_code: 0,
        ..InjectOptions::default()
    };
    assert!(matches!(
        inject_text("a: 1\n", "x", &bad, INJECT),
        Err(InjectError::Options(_))
    ));
}

#[test]
fn files_and_folders_are_read_in_order() {
    let dir = std::env::temp_dir().join(format!("rebound-inject-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: NAME}\nspec: {template: {spec: {containers: [{name: c, image: i}]}}}\n";
    std::fs::write(dir.join("b.yaml"), job.replace("NAME", "b")).expect("b");
    std::fs::write(dir.join("a.yml"), job.replace("NAME", "a")).expect("a");
    std::fs::write(dir.join("notes.txt"), "not yaml: [").expect("txt");
    let single = dir.join("c.json");
    std::fs::write(
            &single,
            r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"c"},"spec":{"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}"#,
        )
        .expect("c");
    let out = inject_all(
        &[single.clone(), dir.clone()],
        &InjectOptions::default(),
        INJECT,
    )
    .expect("inject");
    let names: Vec<String> = docs(&out.yaml)
        .iter()
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        ["c", "a", "b", "c"],
        "file, then the folder sorted (c.json is in it too)"
    );
    assert_eq!(out.templates, 4);
    let missing = inject_all(&[dir.join("nope.yaml")], &InjectOptions::default(), INJECT);
    assert!(matches!(missing, Err(InjectError::Read { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}
