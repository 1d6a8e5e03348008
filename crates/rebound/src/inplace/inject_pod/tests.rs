use super::*;

const T: AgentTarget<'static> = AgentTarget {
    job_api: "batch/v1/jobs",
    job_name_label: "batch.kubernetes.io/job-name",
};
const S: AgentSettings<'static> = AgentSettings {
    image: "reg/rebound:1",
    exit_code: 87,
    probe_port: 9079,
};

fn tpl(containers: Value) -> Value {
    json!({"metadata": {"labels": {"a": "b"}}, "spec": {"restartPolicy": "Never", "containers": containers}})
}

fn agent(t: &Value) -> &Value {
    t["spec"]["initContainers"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == AGENT_CONTAINER))
        .expect("agent")
}

#[test]
fn adds_the_sidecar_with_rule_probe_env_and_restricted_security() {
    let mut t = tpl(json!([{"name": "w", "image": "i"}]));
    let ch = wire(&mut t, "spec.template", &T, &S).expect("wire");
    assert!(ch.changed && ch.warnings.is_empty());
    let a = agent(&t);
    assert_eq!(a["restartPolicy"], "Always");
    assert_eq!(
        a["restartPolicyRules"],
        json!([{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [87]}}])
    );
    assert_eq!(a["startupProbe"]["httpGet"]["path"], PROBE_PATH);
    assert_eq!(a["startupProbe"]["httpGet"]["port"], 9079);
    assert_eq!(a["startupProbe"]["periodSeconds"], 1);
    assert!(a["startupProbe"]["failureThreshold"].as_u64() >= Some(3600));
    assert_eq!(a["command"], json!(["rebound", "restart-agent"]));
    assert_eq!(a["args"], json!(["--exit-code=87", "--probe-port=9079"]));
    assert_eq!(a["image"], "reg/rebound:1");
    let env = a["env"].as_array().expect("env");
    let names: Vec<&str> = env.iter().filter_map(name_of).collect();
    assert_eq!(
        names,
        [
            "REBOUND_JOB_API",
            "REBOUND_JOB_NAME",
            "POD_NAMESPACE",
            "POD_NAME"
        ]
    );
    assert_eq!(env[0]["value"], "batch/v1/jobs");
    assert_eq!(
        env[1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.labels['batch.kubernetes.io/job-name']"
    );
    assert_eq!(a["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        a["resources"],
        json!({}),
        "a BestEffort pod: the agent asks for nothing, the pod stays BestEffort"
    );
    // Nothing else moved.
    assert_eq!(t["metadata"], json!({"labels": {"a": "b"}}));
    assert_eq!(
        t["spec"]["containers"],
        json!([{"name": "w", "image": "i"}])
    );
    assert_eq!(t["spec"]["restartPolicy"], "Never");
}

#[test]
fn a_new_agent_is_exactly_what_wire_adds_to_a_pod_without_one() {
    for (r, res) in [
        (AgentResources::Shared, json!({})),
        (AgentResources::Burstable, json!({"requests": {"cpu": "1"}})),
        (
            AgentResources::Guaranteed,
            json!({"limits": {"cpu": "1", "memory": "1Gi"}}),
        ),
    ] {
        let mut t = tpl(json!([{"name": "w", "image": "i", "resources": res}]));
        wire(&mut t, "t", &T, &S).expect("wire");
        assert_eq!(agent(&t), &new_agent(&T, &S, r));
    }
}

/// The agent never changes a pod's QoS class nor breaks its resources:
/// BestEffort stays BestEffort, a pod with pod-level resources shares
/// them (requests of the agent's own could exceed the pod's), a Burstable
/// pod gets small requests, a Guaranteed one requests equal to limits.
#[test]
fn the_agent_asks_for_what_keeps_the_pod_as_it_is() {
    use AgentResources::*;
    let spec = |containers: Value, pod: Option<Value>| {
        let mut s = json!({"containers": containers});
        if let Some(p) = pod {
            s["resources"] = p;
        }
        s
    };
    let none = json!([{"name": "w"}, {"name": "x", "resources": {}}]);
    let some = json!([{"name": "w", "resources": {"requests": {"cpu": "1"}}}, {"name": "x"}]);
    let all = json!([{"name": "w", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]);
    assert_eq!(AgentResources::of(&spec(none.clone(), None)), Shared);
    assert_eq!(AgentResources::of(&spec(some.clone(), None)), Burstable);
    assert_eq!(AgentResources::of(&spec(all.clone(), None)), Guaranteed);
    let pod = json!({"requests": {"cpu": "4", "memory": "8Gi"}});
    for c in [none, some, all.clone()] {
        assert_eq!(AgentResources::of(&spec(c, Some(pod.clone()))), Shared);
    }
    // Empty pod-level resources are none.
    assert_eq!(
        AgentResources::of(&spec(all, Some(json!({"requests": {}})))),
        Guaranteed
    );
    // An init container that sets something counts; an old agent does not.
    let s = json!({"containers": [{"name": "w"}],
        "initContainers": [{"name": AGENT_CONTAINER, "resources": {"requests": {"cpu": "10m"}}}]});
    assert_eq!(AgentResources::of(&s), Shared);
    let s = json!({"containers": [{"name": "w"}],
        "initContainers": [{"name": "setup", "resources": {"requests": {"cpu": "10m"}}}]});
    assert_eq!(AgentResources::of(&s), Burstable);
}

#[test]
fn a_guaranteed_pod_stays_guaranteed() {
    let r = json!({"limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}});
    let mut t = tpl(json!([{"name": "w", "image": "i", "resources": r}]));
    wire(&mut t, "t", &T, &S).expect("wire");
    let res = &agent(&t)["resources"];
    assert_eq!(res["requests"], res["limits"]);
    assert!(!res["limits"]["cpu"].is_null());
}

#[test]
fn wiring_twice_changes_nothing_and_an_old_agent_is_updated_in_place() {
    let mut t = tpl(json!([{"name": "w", "image": "i"}]));
    t["spec"]["initContainers"] = json!([
        {"name": "setup", "image": "s"},
        {"name": AGENT_CONTAINER, "image": "old", "resources": {"limits": {"memory": "1Gi"}},
         "env": [{"name": "RUST_LOG", "value": "debug"}, {"name": "REBOUND_JOB_API", "value": "stale"}]},
        {"name": "after", "image": "a", "restartPolicy": "Always"},
    ]);
    wire(&mut t, "t", &T, &S).expect("wire");
    let init = t["spec"]["initContainers"].as_array().expect("init");
    assert_eq!(init.len(), 3, "updated, not duplicated");
    assert_eq!(init[1]["name"], AGENT_CONTAINER, "position kept");
    assert_eq!(init[1]["image"], "reg/rebound:1");
    assert_eq!(
        init[1]["resources"],
        json!({"limits": {"memory": "1Gi"}}),
        "user's resources kept"
    );
    let env = init[1]["env"].as_array().expect("env");
    assert_eq!(env[0], json!({"name": "RUST_LOG", "value": "debug"}));
    assert_eq!(env[1]["value"], "batch/v1/jobs");
    assert_eq!(env.len(), 5);
    let once = t.clone();
    let ch = wire(&mut t, "t", &T, &S).expect("again");
    assert!(!ch.changed);
    assert_eq!(t, once);
}

#[test]
fn unwire_removes_only_the_agent() {
    let orig = tpl(json!([{"name": "w", "image": "i"}]));
    let mut t = orig.clone();
    wire(&mut t, "t", &T, &S).expect("wire");
    assert!(unwire(&mut t));
    assert_eq!(t, orig);
    assert!(!unwire(&mut t));
    let mut u = orig.clone();
    u["spec"]["initContainers"] = json!([{"name": "setup", "image": "s"}]);
    let kept = u.clone();
    wire(&mut u, "t", &T, &S).expect("wire");
    unwire(&mut u);
    assert_eq!(u, kept);
}

#[test]
fn refusals_name_the_field() {
    let at = "spec.template";
    let cases = [
        (
            tpl(json!([{"name": AGENT_CONTAINER, "image": "i"}])),
            "spec.template.spec.containers[0].name",
        ),
        (
            tpl(
                json!([{"name": "w", "image": "i", "ports": [{"containerPort": 22}, {"containerPort": 9079}]}]),
            ),
            "spec.template.spec.containers[0].ports[1].containerPort",
        ),
        (
            tpl(
                json!([{"name": "w", "image": "i", "ports": [{"name": PROBE_PORT_NAME, "containerPort": 1}]}]),
            ),
            "spec.template.spec.containers[0].ports[0].name",
        ),
        (tpl(json!([])), "spec.template.spec.containers"),
        (tpl(json!("x")), "spec.template.spec.containers"),
        (json!("x"), "spec.template"),
        (json!({"spec": null}), "spec.template.spec"),
    ];
    for (mut t, field) in cases {
        let before = t.clone();
        let e = wire(&mut t, at, &T, &S).expect_err(field);
        assert_eq!(e.field, field, "{e:?}");
        assert!(!e.reason.is_empty());
        assert_eq!(t, before, "a refused template is left alone");
    }
    let mut w = tpl(json!([{"name": "w", "image": "i"}]));
    w["spec"]["os"] = json!({"name": "windows"});
    assert_eq!(
        wire(&mut w, at, &T, &S).expect_err("windows").field,
        "spec.template.spec.os.name"
    );
    let mut i = tpl(json!([{"name": "w", "image": "i"}]));
    i["spec"]["initContainers"] = json!([{"name": "x", "ports": [{"containerPort": 9079}]}]);
    assert_eq!(
        wire(&mut i, at, &T, &S).expect_err("init port").field,
        "spec.template.spec.initContainers[0].ports[0].containerPort"
    );
    // Another probe port makes it fit.
    let other = AgentSettings {
        probe_port: 9080,
        ..S
    };
    wire(&mut i, at, &T, &other).expect("other port");
}

#[test]
fn host_network_is_wired_with_a_warning() {
    let mut t = tpl(json!([{"name": "w", "image": "i"}]));
    t["spec"]["hostNetwork"] = json!(true);
    let ch = wire(&mut t, "t", &T, &S).expect("wire");
    assert_eq!(ch.warnings.len(), 1);
    assert!(ch.warnings[0].contains("t.spec.hostNetwork"));
}
