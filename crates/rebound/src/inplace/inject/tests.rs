use super::*;
use crate::inplace::AGENT_CONTAINER;
use serde_json::json;

fn pod(name: &str) -> Value {
    json!({"spec": {"containers": [{"name": name, "image": "img"}]}})
}

fn agent_at<'a>(doc: &'a Value, ptr: &str) -> &'a Value {
    doc.pointer(ptr)
        .and_then(|t| t["spec"]["initContainers"].as_array())
        .and_then(|a| a.iter().find(|c| c["name"] == AGENT_CONTAINER))
        .unwrap_or_else(|| panic!("no agent at {ptr}"))
}

fn env<'a>(agent: &'a Value, name: &str) -> &'a Value {
    agent["env"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no env {name}"))
}

fn job_name_path(agent: &Value) -> &str {
    env(agent, "REBOUND_JOB_NAME")["valueFrom"]["fieldRef"]["fieldPath"]
        .as_str()
        .unwrap_or_default()
}

fn inject(doc: &mut Value) -> DocReport {
    inject_document(doc, &InjectOptions::default(), "test").expect("inject")
}

#[test]
fn every_kubeflow_kind_wires_every_replica() {
    for (kind, plural, specs) in KUBEFLOW_KINDS {
        let mut doc = json!({
            "apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": "j"},
            "spec": {specs: {"Master": {"replicas": 1, "template": pod("m")},
                             "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": pod("w")}}},
        });
        let r = inject(&mut doc);
        assert_eq!(r.templates, 2, "{kind}");
        assert!(r.changed);
        for rt in ["Master", "Worker"] {
            let a = agent_at(&doc, &format!("/spec/{specs}/{rt}/template"));
            assert_eq!(
                env(a, "REBOUND_JOB_API")["value"],
                format!("kubeflow.org/v1/{plural}")
            );
            assert_eq!(
                job_name_path(a),
                "metadata.labels['training.kubeflow.org/job-name']"
            );
        }
        assert_eq!(
            doc["spec"][specs]["Worker"]["restartPolicy"], "OnFailure",
            "replica fields untouched"
        );
        assert!(
            r.caveats.iter().any(|w| w.contains("restartPolicyRules")),
            "{kind}: the CRD caveat is said"
        );
    }
}

#[test]
fn volcano_jobset_batch_and_runtimes_wire_their_templates() {
    let mut v = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
        "spec": {"tasks": [{"name": "a", "template": pod("a")}, {"name": "b", "template": pod("b")}]}});
    assert_eq!(inject(&mut v).templates, 2);
    let a = agent_at(&v, "/spec/tasks/1/template");
    assert_eq!(
        env(a, "REBOUND_JOB_API")["value"],
        "batch.volcano.sh/v1alpha1/jobs"
    );
    assert_eq!(job_name_path(a), "metadata.labels['volcano.sh/job-name']");

    let rj = |name: &str| json!({"name": name, "replicas": 2, "template": {"spec": {"parallelism": 2, "template": pod(name)}}});
    let mut js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
        "spec": {"replicatedJobs": [rj("driver"), rj("workers")]}});
    assert_eq!(inject(&mut js).templates, 2);
    let a = agent_at(&js, "/spec/replicatedJobs/1/template/spec/template");
    assert_eq!(
        env(a, "REBOUND_JOB_API")["value"],
        "jobset.x-k8s.io/v1alpha2/jobsets"
    );
    assert_eq!(
        job_name_path(a),
        "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
    );

    let mut b = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"},
        "spec": {"completions": 4, "template": pod("w")}});
    assert_eq!(inject(&mut b).templates, 1);
    let a = agent_at(&b, "/spec/template");
    assert_eq!(env(a, "REBOUND_JOB_API")["value"], "batch/v1/jobs");
    assert_eq!(
        job_name_path(a),
        "metadata.labels['batch.kubernetes.io/job-name']"
    );

    for kind in ["TrainingRuntime", "ClusterTrainingRuntime"] {
        let step = |name: &str, s: &str| {
            json!({"name": name, "template": {"metadata": {"labels": {TRAINER_ANCESTOR_LABEL: s}},
            "spec": {"template": pod(name)}}})
        };
        let mut rt = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": {"name": "torch"},
        "spec": {"mlPolicy": {"numNodes": 2}, "template": {"spec": {"replicatedJobs": [
            step("dataset-initializer", "dataset-initializer"),
            step("model-initializer", "model-initializer"),
            step("node", "trainer"),
        ]}}}});
        let r = inject(&mut rt);
        assert_eq!(r.templates, 1, "{kind}: only the trainer nodes");
        let a = agent_at(
            &rt,
            "/spec/template/spec/replicatedJobs/2/template/spec/template",
        );
        assert_eq!(
            env(a, "REBOUND_JOB_API")["value"],
            "trainer.kubeflow.org/v1alpha1/trainjobs"
        );
        assert_eq!(
            job_name_path(a),
            "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
        );
        assert!(
            rt.pointer(
                "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/initContainers"
            )
            .is_none(),
            "initializers untouched"
        );
    }
}

#[test]
fn a_trainjob_and_other_kinds_pass_through_unchanged() {
    let tj = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 4}}});
    let mut d = tj.clone();
    let r = inject(&mut d);
    assert_eq!(d, tj);
    assert!(!r.changed && r.templates == 0);
    assert!(r.warnings[0].contains("clustertrainingruntime torch-distributed"));
    for other in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": pod("x")}}),
        json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}}),
        json!(null),
    ] {
        let mut d = other.clone();
        assert_eq!(inject(&mut d), DocReport::default());
        assert_eq!(d, other);
    }
}

#[test]
fn injecting_twice_changes_nothing_and_uninject_restores() {
    let orig = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": pod("w")}}}});
    let mut d = orig.clone();
    assert!(inject(&mut d).changed);
    let once = d.clone();
    let r = inject(&mut d);
    assert!(!r.changed && r.templates == 1);
    assert_eq!(d, once);
    assert_eq!(uninject_document(&mut d), 1);
    assert_eq!(d, orig);
}

#[test]
fn options_change_image_code_and_port() {
    let mut d = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "b"}, "spec": {"template": pod("w")}});
    let o = InjectOptions {
        image: "r.io/rebound:2".into(),
        exit_code: 42,
        probe_port: 19079,
    };
    inject_document(&mut d, &o, "x").expect("inject");
    let a = agent_at(&d, "/spec/template");
    assert_eq!(a["image"], "r.io/rebound:2");
    assert_eq!(
        a["restartPolicyRules"][0]["exitCodes"]["values"],
        json!([42])
    );
    assert_eq!(a["startupProbe"]["httpGet"]["port"], 19079);
    assert_eq!(a["args"], json!(["--exit-code=42", "--probe-port=19079"]));
    // A re-injection with other options updates the agent in place.
    inject(&mut d);
    let a = agent_at(&d, "/spec/template");
    assert_eq!(a["image"], DEFAULT_IMAGE);
    assert_eq!(
        a["restartPolicyRules"][0]["exitCodes"]["values"],
        json!([87])
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["initContainers"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn options_are_validated() {
    let ok = InjectOptions::default();
    assert!(ok.validate().is_ok());
    for bad in [
        InjectOptions {
            exit_code: 0,
            ..ok.clone()
        },
        InjectOptions {
            exit_code: 256,
            ..ok.clone()
        },
        InjectOptions {
            probe_port: 0,
            ..ok.clone()
        },
        InjectOptions {
            image: " ".into(),
            ..ok.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    // The agent's own failure exits would restart the whole pod.
    for code in [1, 2, 101, 126, 127, 134, 137, 139, 143, 255] {
        let bad = InjectOptions {
            exit_code: code,
            ..ok.clone()
        };
        let err = bad.validate().expect_err("a failure exit");
        assert!(err.contains(&format!("--exit-code {code}")), "{err}");
    }
    for code in [DEFAULT_EXIT_CODE, 42, 90, 200] {
        let good = InjectOptions {
            exit_code: code,
            ..ok.clone()
        };
        assert!(good.validate().is_ok(), "{code}");
    }
}

#[test]
fn refusals_name_document_and_field_and_leave_it_alone() {
    let js = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
        "spec": {"failurePolicy": {"restartStrategy": "InPlaceRestart"},
                 "replicatedJobs": [{"name": "w", "template": {"spec": {"template": pod("w")}}}]}});
    let mut d = js.clone();
    let e = inject_document(
        &mut d,
        &InjectOptions::default(),
        "a.yaml document 1 (JobSet s)",
    )
    .expect_err("refused");
    assert_eq!(e.field, "spec.failurePolicy.restartStrategy");
    assert!(
        e.to_string()
            .starts_with("a.yaml document 1 (JobSet s): spec.failurePolicy.restartStrategy: ")
    );
    assert_eq!(d, js);

    // The second template is refused: the first stays unwired too.
    let pt = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"template": pod("m")},
                                         "Worker": {"template": pod(AGENT_CONTAINER)}}}});
    let mut d = pt.clone();
    let e = inject_document(&mut d, &InjectOptions::default(), "x").expect_err("refused");
    assert_eq!(
        e.field,
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name"
    );
    assert_eq!(d, pt);

    let mut missing = json!({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
        "spec": {"tasks": [{"name": "a"}]}});
    assert_eq!(
        inject_document(&mut missing, &InjectOptions::default(), "x")
            .expect_err("no template")
            .field,
        "spec.tasks[0].template"
    );
    let mut rt = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "r"}, "spec": {"template": {"spec": {"failurePolicy": {"restartStrategy": "InPlaceRestart"}}}}});
    assert_eq!(
        inject_document(&mut rt, &InjectOptions::default(), "x")
            .expect_err("jobset in-place")
            .field,
        "spec.template.spec.failurePolicy.restartStrategy"
    );
}
