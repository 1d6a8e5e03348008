//! The samples classify what the real parsers report (pod, node, Event,
//! the Ascend device plugin's own level).

use super::*;

// --- through the real parsers --------------------------------------------------------------

/// A Kubernetes time `secs` seconds before `now`.
fn ago(now: DateTime<Utc>, secs: i64) -> String {
    (now - Duration::seconds(secs)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[test]
fn samples_classify_what_the_pod_parser_reports() {
    let now = Utc::now();
    let mut pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "llm-worker-1", "namespace": "team-c", "uid": "u-1"},
        "spec": {"nodeName": "gpu-3", "containers": [{"name": "pytorch"}]},
        "status": {
            "phase": "Running",
            "startTime": ago(now, 600),
            "containerStatuses": [{
                "name": "pytorch", "image": "trainer", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": 137, "reason": "OOMKilled",
                    "startedAt": ago(now, 600), "finishedAt": ago(now, 5)
                }}
            }]
        }
    }))
    .expect("a Pod");
    let faults = rebound::fault::pod::pod_faults(&pod, now);
    assert_eq!(faults.len(), 1, "{faults:?}");
    let job = parse_job(
        "kind=PyTorchJob,name=llm,namespace=team-c,labels.kcover.io/cascading-recovery=true",
        &[],
        &[],
        now,
    )
    .unwrap();
    let d = explain(&mut engine(), faults[0].clone(), Some(job), 1, now);
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::RestartJob, "pod-exit/oom-killed")
    );
    assert!(job_restarts_whole_job(&d), "{:?}", d.jobs);
    // A pod being deleted (rebound's own restart) reports nothing to classify.
    pod.metadata.deletion_timestamp = serde_json::from_value(json!(ago(now, 1))).ok();
    assert!(rebound::fault::pod::pod_faults(&pod, now).is_empty());
}

#[test]
fn samples_classify_what_the_node_parser_reports() {
    let now = Utc::now();
    // The controller's default --condition-types.
    let watched: Vec<String> = rebound::fault::node::DEFAULT_CONDITION_TYPES
        .split(',')
        .map(String::from)
        .collect();
    let node = |conditions: serde_json::Value| -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": "gpu-7"}, "status": {"conditions": conditions}}),
        )
        .expect("a Node")
    };
    let decide_all = |n: &Node| -> Vec<(String, Level)> {
        let mut e = engine();
        rebound::fault::node::node_faults(n, &watched, now)
            .into_iter()
            .map(|f| {
                let code = f.code.clone();
                (code, explain(&mut e, f, None, 1, now).level)
            })
            .collect()
    };
    // A dead kubelet: Ready Unknown since 5 minutes, heartbeat older still.
    let dead = node(json!([
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
         "lastTransitionTime": ago(now, 300), "lastHeartbeatTime": ago(now, 340)}
    ]));
    assert_eq!(
        decide_all(&dead),
        [("NotReady".to_string(), Level::ResetDevice)]
    );
    // Just gone NotReady: not yet.
    let blip = node(json!([
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
         "lastTransitionTime": ago(now, 20), "lastHeartbeatTime": ago(now, 5)}
    ]));
    assert_eq!(decide_all(&blip), [("NotReady".to_string(), Level::Ignore)]);
    // node-problem-detector and rebound's agent on one node.
    let sick = node(json!([
        {"type": "Ready", "status": "True", "lastTransitionTime": ago(now, 9000)},
        {"type": "KernelDeadlock", "status": "True", "reason": "DockerHung", "lastTransitionTime": ago(now, 60)},
        {"type": "FrequentKubeletRestart", "status": "True", "lastTransitionTime": ago(now, 60)},
        {"type": "GpuFault", "status": "True", "reason": "Xid", "lastTransitionTime": ago(now, 30),
         "message": "source=NvidiaXid code=79 device=3 | GPU has fallen off the bus\nnot a rebound line"}
    ]));
    let got: BTreeMap<String, Level> = decide_all(&sick).into_iter().collect();
    assert_eq!(got.get("KernelDeadlock"), Some(&Level::Separate), "{got:?}");
    assert_eq!(
        got.get("FrequentKubeletRestart"),
        Some(&Level::PreSeparate),
        "{got:?}"
    );
    assert_eq!(got.get("79"), Some(&Level::Separate), "{got:?}");
    assert_eq!(
        got.get("GpuFault"),
        Some(&Level::PreSeparate),
        "an unreadable line: {got:?}"
    );
}

#[test]
fn samples_classify_what_the_event_parser_reports() {
    let now = Utc::now();
    let ev: Event = serde_json::from_value(json!({
        "metadata": {"name": "llm-worker-1.1", "namespace": "team-a",
                     "annotations": {"kcover.io/need-recovery": "true"}},
        "involvedObject": {"kind": "Pod", "name": "llm-worker-1", "namespace": "team-a"},
        "reason": "DCGMDiagFailed",
        "message": "dcgmi diag -r 1 failed on GPU 2",
        "lastTimestamp": ago(now, 2)
    }))
    .expect("an Event");
    let f = rebound::fault::event::event_fault(&ev, ROOT_NS, now)
        .expect("a fault")
        .expect("readable");
    assert_eq!(f.source, FaultSource::KubeEvent);
    let job = parse_job(OPTED_IN_LLM, &[], &[], now).unwrap();
    let d = explain(&mut engine(), f, Some(job), 1, now);
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::RestartJob, "kube-event/kcover-need-recovery")
    );
    assert!(d.jobs[0].acts(), "{:?}", d.jobs);
}

#[test]
fn samples_follow_the_ascend_device_plugins_own_level() {
    // The plugin's level name arrives as the reason and wins over the table,
    // so a site's customised faultCode.json is followed.
    let level = |fault: &str| classify_once(fault);
    let d = level("source=AscendNpu,code=80E18402,reason=SeparateNPU,node=n,device=4");
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::Separate, "ascend-npu/plugin-says-separate")
    );
    let d = level("source=AscendNpu,code=80E18402,reason=NotHandleFault,node=n,device=4");
    assert_eq!(
        d.level,
        Level::Ignore,
        "a site that lowered 80E18402 is followed"
    );
    let d = level("source=AscendNpu,code=81078603,reason=PreSeparateNPU,node=n,device=0");
    assert_eq!(
        d.level,
        Level::PreSeparate,
        "the plugin's duration escalation is followed"
    );
    let d = level("source=AscendNpu,code=ManuallySeparateNPU,node=n,device=0");
    assert_eq!(d.level, Level::Separate);
    let d = level("source=AscendNpu,code=DEADBEEF,node=n,device=0");
    assert_eq!(
        (d.level, d.rule.as_str()),
        (Level::PreSeparate, "ascend-npu/defaultLevel")
    );

    // End to end: the documented Atlas A3 device-info value through the parser.
    let Some(value) = read_data(A3_FAULTY_JSON) else {
        return;
    };
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(format!(
        "{}a3-node-9",
        rebound::fault::ascend::DEVICEINFO_PREFIX
    ));
    cm.metadata.namespace = Some(rebound::fault::ascend::DEVICEINFO_NAMESPACE.to_string());
    cm.data = Some(
        [(
            rebound::fault::ascend::DEVICEINFO_KEY.to_string(),
            value.trim().to_string(),
        )]
        .into(),
    );
    let now = Utc::now();
    let faults = rebound::fault::ascend::deviceinfo_faults(&cm, now).expect("parses");
    let mut e = engine();
    let got: BTreeMap<(String, String), Level> = faults
        .into_iter()
        .map(|f| {
            let key = (f.device.clone().unwrap_or_default(), f.code.clone());
            (
                key,
                explain(
                    &mut e,
                    f,
                    Some(parse_job(OPTED_IN_LLM, &[], &[], now).unwrap()),
                    1,
                    now,
                )
                .level,
            )
        })
        .collect();
    let at = |dev: &str, code: &str| got.get(&(dev.to_string(), code.to_string())).copied();
    assert_eq!(at("4", "80E18402"), Some(Level::Separate), "{got:?}");
    assert_eq!(at("4", "A8028801"), Some(Level::Separate), "{got:?}");
    assert_eq!(at("0", "81078603"), Some(Level::PreSeparate), "{got:?}");
    assert_eq!(got.values().max(), Some(&Level::Separate));
}
