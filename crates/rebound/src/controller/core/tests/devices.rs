//! Device scope and device isolation (devices.rs): on one node, j0's pod
//! holds GPU 3 and j1's GPU 5 through their ResourceClaims.

use super::super::effect::EffectKind;
use super::super::input::{Change, DraChange, Input};
use super::bed::Bed;
use super::model::{self, Model};
use serde_json::json;

/// The DRA objects of node n0: a slice of 8 GPUs, j0's pod's claim on
/// gpu-3, j1's on gpu-5, and no rules of rebound's yet.
fn dra_inputs(b: &Bed) -> Vec<Input> {
    let devices: Vec<serde_json::Value> = (0..8)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"uuid": {"string": format!("GPU-{i}")}}}))
        .collect();
    let slice = serde_json::from_value(json!({
        "metadata": {"name": "n0-gpu.nvidia.com"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "n0",
                 "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    }))
    .expect("slice");
    let claim = |job: &str, gpu: &str| {
        let pod = b
            .pods_of(job)
            .into_iter()
            .next()
            .map_or_else(|| format!("{job}-gone"), |(p, _)| p);
        serde_json::from_value(json!({
            "metadata": {"namespace": model::NS, "name": format!("{pod}-gpu")},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": gpu}]}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": "u"}]
            }
        }))
        .expect("claim")
    };
    vec![
        Input::Dra(DraChange::Served {
            claims: true,
            rules: true,
        }),
        Input::Dra(DraChange::Slice(Change::Relist)),
        Input::Dra(DraChange::Slice(Change::Apply(Box::new(slice)))),
        Input::Dra(DraChange::Slice(Change::Synced)),
        Input::Dra(DraChange::Claim(Change::Relist)),
        Input::Dra(DraChange::Claim(Change::Apply(Box::new(claim(
            "j0", "gpu-3",
        ))))),
        Input::Dra(DraChange::Claim(Change::Apply(Box::new(claim(
            "j1", "gpu-5",
        ))))),
        Input::Dra(DraChange::Claim(Change::Synced)),
        Input::Dra(DraChange::Rule(Change::Relist)),
        Input::Dra(DraChange::Rule(Change::Synced)),
    ]
}

/// One node, two one-pod jobs on it, the DRA objects, and `isolation`.
fn bed(isolation: &str) -> Bed {
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["isolation"] = json!(isolation);
    let mut b = Bed::on(Model::new(1, 2, 1), Some(spec));
    let ins = dra_inputs(&b);
    b.feed(ins);
    b.pump();
    b
}

/// The jobs restarted so far, by name.
fn restarted(b: &Bed) -> Vec<String> {
    let mut v: Vec<String> = b
        .log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::RestartJob { job, .. } => Some(job.name.clone()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn isolations(b: &Bed) -> Vec<String> {
    b.log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::IsolateDevice { device, .. } => Some(device.device.clone()),
            _ => None,
        })
        .collect()
}

fn lifts(b: &Bed) -> usize {
    b.count(|k| matches!(k, EffectKind::LiftDevice { .. }))
}

#[test]
fn a_job_level_fault_on_one_gpu_restarts_only_the_job_holding_it() {
    let mut b = bed("Node");
    // XID 13 (RestartJob) on GPU 3.
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert_eq!(restarted(&b), ["j0"], "the job on GPU 3 alone");
    assert_eq!(b.cordons(), 0);
    // The way back: without the claims listed, the node is the scope.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert_eq!(restarted(&b), ["j0", "j1"], "no DRA: every job on the node");
}

#[test]
fn with_device_isolation_a_reset_fault_isolates_the_gpu_and_not_the_node() {
    let mut b = bed("Device");
    // XID 48 (ResetDevice) on GPU 3.
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert_eq!(isolations(&b), ["gpu-3"]);
    assert_eq!(b.cordons(), 0, "the node stays in service");
    assert_eq!(restarted(&b), ["j0"], "only the job holding GPU 3");
    assert_eq!(
        b.count(
            |k| matches!(k, EffectKind::Event { notice, .. } if notice.reason == "DeviceIsolated")
        ),
        1
    );
    // Decided again (a tick, a relist of the node): not isolated twice.
    b.pass(3);
    assert_eq!(isolations(&b).len(), 1);
    let gauge = |b: &Bed| {
        b.core
            .metrics
            .encode()
            .lines()
            .find(|l| l.starts_with("rebound_isolated_devices "))
            .map(str::to_string)
    };
    assert_eq!(gauge(&b).as_deref(), Some("rebound_isolated_devices 1"));
    // The fault clears: the device returns to scheduling.
    b.m.node_clear("n0");
    b.pump();
    assert_eq!(lifts(&b), 1);
    assert_eq!(b.cordons(), 0);
    b.pass(1);
    assert_eq!(gauge(&b).as_deref(), Some("rebound_isolated_devices 0"));
}

#[test]
fn with_node_isolation_the_same_fault_cordons_the_node_and_restarts_every_job() {
    let mut b = bed("Node");
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert!(isolations(&b).is_empty());
    assert_eq!(b.cordons(), 1);
    assert_eq!(restarted(&b), ["j0", "j1"]);
}

#[test]
fn a_node_losing_more_devices_than_allowed_is_cordoned_instead() {
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["isolation"] = json!("Device");
    spec["nodeActions"]["maxIsolatedDevices"] = json!(1);
    let mut b = Bed::on(Model::new(1, 2, 1), Some(spec));
    let ins = dra_inputs(&b);
    b.feed(ins);
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert_eq!(isolations(&b), ["gpu-3"], "one device may go");
    b.m.node_fault_on("n0", "48", "5");
    b.pump();
    assert_eq!(b.cordons(), 1, "a second one takes the node out");
    assert!(
        cordon_notes(&b).iter().any(|n| n
            .contains("isolation: Device fell back to the node: more than maxIsolatedDevices (1)")),
        "{:?}",
        cordon_notes(&b)
    );
}

/// The notes of the node Events saying a node was cordoned or tainted.
fn cordon_notes(b: &Bed) -> Vec<String> {
    b.log
        .iter()
        .filter_map(|e| match &e.kind {
            EffectKind::Event { notice, .. }
                if notice.reason == "NodeCordoned" || notice.reason == "NodeTainted" =>
            {
                Some(notice.note.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn without_dra_device_isolation_cordons_the_node_and_says_why() {
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["isolation"] = json!("Device");
    let mut b = Bed::on(Model::new(1, 2, 1), Some(spec));
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert_eq!(b.cordons(), 1);
    assert!(isolations(&b).is_empty());
    assert!(
        cordon_notes(&b).iter().any(|n| n.contains(
            "isolation: Device fell back to the node: the API server serves no ResourceSlices"
        )),
        "{:?}",
        cordon_notes(&b)
    );
}

#[test]
fn a_controller_restart_with_the_rule_in_the_cluster_neither_isolates_again_nor_forgets_to_return_it()
 {
    let mut b = bed("Device");
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    let rule = b
        .log
        .iter()
        .find_map(|e| match &e.kind {
            EffectKind::IsolateDevice {
                rule, node, device, ..
            } => Some(
                crate::recover::device::device_taint_rule(rule, node, device, "48", false)
                    .expect("rule"),
            ),
            _ => None,
        })
        .expect("isolated");
    // j0's new pod is made (on another device: it holds none of n0's
    // here); a new controller, the rule in the cluster (its watch lists it).
    b.m.operator();
    b.pump();
    b.core = model::core();
    let mut ins = b.m.startup();
    ins.extend(dra_inputs(&b));
    ins.insert(
        ins.len() - 1,
        Input::Dra(DraChange::Rule(Change::Apply(Box::new(rule)))),
    );
    ins.push(Input::Leader(true, 2));
    b.feed(ins);
    b.pump();
    b.pass(2);
    assert_eq!(isolations(&b).len(), 1, "not isolated again");
    // Positive control: the new controller follows the rule; the fault
    // clears and it returns the device.
    b.m.node_clear("n0");
    b.pump();
    assert_eq!(lifts(&b), 1);
}

#[test]
fn a_failed_isolation_is_retried() {
    let mut b = bed("Device");
    b.refuse = |k| matches!(k, EffectKind::IsolateDevice { .. });
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert_eq!(isolations(&b).len(), 1);
    b.refuse = |_| false;
    b.pass(20);
    assert!(isolations(&b).len() >= 2, "tried again after its backoff");
    assert_eq!(
        b.count(
            |k| matches!(k, EffectKind::Event { notice, .. } if notice.reason == "DeviceIsolated")
        ),
        1,
        "announced once, when made"
    );
}

/// `bed("Device")` with a validation of `timeout`, its GPU 3 isolated
/// and the rule shown by its watch (with a uid), then the fault cleared.
fn validating(timeout: &str) -> Bed {
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["isolation"] = json!("Device");
    spec["nodeActions"]["validation"] = json!({"timeout": timeout, "job": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "diag", "image": "dcgm"}]}}}});
    let mut b = Bed::on(Model::new(1, 2, 1), Some(spec));
    let ins = dra_inputs(&b);
    b.feed(ins);
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert_eq!(isolations(&b), ["gpu-3"]);
    let mut rule = b
        .log
        .iter()
        .find_map(|e| match &e.kind {
            EffectKind::IsolateDevice {
                rule, node, device, ..
            } => crate::recover::device::device_taint_rule(rule, node, device, "48", false).ok(),
            _ => None,
        })
        .expect("isolated");
    rule.metadata.uid = Some("rule-uid-1".into());
    b.feed(vec![Input::Dra(DraChange::Rule(Change::Apply(Box::new(
        rule,
    ))))]);
    b.m.node_clear("n0");
    b.pump();
    b
}

fn validations(b: &Bed) -> usize {
    b.count(|k| matches!(k, EffectKind::Validate { .. }))
}

fn failed_notes(b: &Bed) -> usize {
    b.count(
        |k| matches!(k, EffectKind::Event { notice, .. } if notice.reason == "ValidationFailed"),
    )
}

#[test]
fn a_device_returns_only_after_its_validation_job_succeeds() {
    let mut b = validating("10m");
    assert_eq!(
        validations(&b),
        1,
        "the validation runs once the fault clears"
    );
    assert_eq!(lifts(&b), 0, "not before it passed");
    let job = b
        .log
        .iter()
        .find_map(|e| match &e.kind {
            EffectKind::Validate { job, node, env, .. } => {
                Some((job.clone(), node.clone(), env.clone()))
            }
            _ => None,
        })
        .expect("validate");
    assert_eq!(job.0, super::super::validation::job_name("rule-uid-1"));
    assert_eq!(job.1, "n0");
    assert!(
        job.2
            .contains(&("REBOUND_DEVICE_UUID".to_string(), "GPU-3".to_string())),
        "{:?}",
        job.2
    );
    b.pass(12);
    assert!(
        b.count(|k| matches!(k, EffectKind::ReadValidation { .. })) >= 2,
        "read while it runs"
    );
    assert_eq!(lifts(&b), 0, "still running");
    b.m.validation = "Succeeded".into();
    b.pass(6);
    assert_eq!(lifts(&b), 1, "returned once it passed");
    assert_eq!(validations(&b), 1, "run once");
    assert_eq!(failed_notes(&b), 0);
}

#[test]
fn a_failed_validation_keeps_the_device_out_and_says_so_once() {
    let mut b = validating("10m");
    b.m.validation = "Failed: failed (BackoffLimitExceeded)".into();
    b.pass(30);
    assert_eq!(failed_notes(&b), 1, "said once");
    assert_eq!(lifts(&b), 0, "the device stays out");
    // A person deletes the Job to run it again: it runs again, and
    // passes this time.
    b.m.validation = String::new();
    b.pass(35);
    b.m.validation = "Succeeded".into();
    b.pass(12);
    assert_eq!(validations(&b), 2, "run again after its Job was deleted");
    assert_eq!(lifts(&b), 1);
}

#[test]
fn a_validation_that_runs_past_its_timeout_counts_as_failed() {
    let mut b = validating("30s");
    b.pass(25);
    assert_eq!(failed_notes(&b), 0, "within its time");
    b.pass(10);
    assert_eq!(failed_notes(&b), 1, "past its time");
    // Succeeding after the timeout does not return the device.
    b.m.validation = "Succeeded".into();
    b.pass(10);
    assert_eq!(lifts(&b), 0);
}

#[test]
fn with_nodes_validated_a_cordoned_node_is_uncordoned_only_after_its_validation_passes() {
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["validation"] = json!({"nodes": true, "job": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "diag", "image": "dcgm"}]}}}});
    let mut b = Bed::new(Some(spec));
    b.m.node_fault("n1", "79");
    b.pump();
    assert_eq!(b.cordons(), 1);
    b.m.node_clear("n1");
    b.pump();
    let uncordons = |b: &Bed| b.count(|k| matches!(k, EffectKind::Uncordon { .. }));
    let what = b.log.iter().find_map(|e| match &e.kind {
        EffectKind::Validate { what, node, .. } => Some((what.clone(), node.clone())),
        _ => None,
    });
    assert_eq!(what, Some(("node".to_string(), "n1".to_string())));
    b.pass(12);
    assert_eq!(uncordons(&b), 0, "not while it runs");
    b.m.validation = "Succeeded".into();
    b.pass(6);
    assert_eq!(uncordons(&b), 1, "uncordoned once it passed");
    // Without `nodes`, a node is uncordoned at once (today's behaviour).
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["validation"] = json!({"job": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "diag", "image": "dcgm"}]}}}});
    let mut b = Bed::new(Some(spec));
    b.m.node_fault("n1", "79");
    b.pump();
    b.m.node_clear("n1");
    b.pump();
    assert_eq!(uncordons(&b), 1);
    assert_eq!(validations(&b), 0);
}

#[test]
fn device_scope_waits_for_the_dra_lists_at_start_and_gives_them_up_after_their_bound() {
    // DRA is served; the claims are not listed yet when a job-level fault
    // on GPU 3 comes: nothing is restarted until they are, then only j0.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    let all = dra_inputs(&b);
    let (claims_synced, early): (Vec<Input>, Vec<Input>) = all
        .into_iter()
        .partition(|i| matches!(i, Input::Dra(DraChange::Claim(Change::Synced))));
    b.feed(early);
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert!(restarted(&b).is_empty(), "waits for the claims");
    b.feed(claims_synced);
    b.pump();
    assert_eq!(restarted(&b), ["j0"], "decided once they are in");
    // Served, never listed (a dead list): after the bound, the node.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    b.feed(vec![Input::Dra(DraChange::Served {
        claims: true,
        rules: true,
    })]);
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert!(restarted(&b).is_empty());
    let bound = super::super::store::dra::LIST_BOUND.as_secs() as i64;
    b.pass(bound - 2);
    assert!(restarted(&b).is_empty(), "within the bound");
    b.pass(4);
    assert_eq!(restarted(&b), ["j0", "j1"], "the node's jobs past it");
}

#[test]
fn a_device_isolation_the_breaker_holds_holds_the_restart_of_its_job() {
    // Two nodes: j0's pod on n1 holds GPU 3 there, j1's pod is on n0. One
    // separation allowed in the window.
    let mut spec = model::default_policy_spec();
    spec["nodeActions"]["isolation"] = json!("Device");
    spec["nodeActions"]["maxSeparated"] = json!("1");
    let mut b = Bed::on(Model::new(2, 2, 1), Some(spec));
    let node_of = |b: &Bed, j: &str| -> String {
        b.m.pods
            .values()
            .find(|p| p["metadata"]["labels"][model::JOBSET_NAME] == j)
            .and_then(|p| p["spec"]["nodeName"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (n_j0, n_j1) = (node_of(&b, "j0"), node_of(&b, "j1"));
    assert_ne!(n_j0, n_j1, "the model places them apart");
    let ins: Vec<Input> = dra_inputs(&b)
        .into_iter()
        .map(|i| match i {
            // n0's slice and claims, moved to j0's node.
            Input::Dra(DraChange::Slice(Change::Apply(mut s))) => {
                s.spec.node_name = Some(n_j0.clone());
                s.spec.pool.name = n_j0.clone();
                s.metadata.name = Some(format!("{n_j0}-gpu.nvidia.com"));
                Input::Dra(DraChange::Slice(Change::Apply(s)))
            }
            Input::Dra(DraChange::Claim(Change::Apply(mut c))) => {
                if let Some(r) = c
                    .status
                    .as_mut()
                    .and_then(|s| s.allocation.as_mut())
                    .and_then(|a| a.devices.as_mut())
                    .and_then(|d| d.results.as_mut())
                {
                    for x in r {
                        x.pool = n_j0.clone();
                    }
                }
                Input::Dra(DraChange::Claim(Change::Apply(c)))
            }
            other => other,
        })
        .collect();
    b.feed(ins);
    // j1's node falls off the bus (no DRA device there): cordoned, the one
    // separation of the window.
    b.m.node_fault_on(&n_j1, "79", "0");
    b.pump();
    assert_eq!(b.cordons(), 1);
    // XID 48 on GPU 3 of j0's node: its isolation is held by the breaker,
    // and so is the restart of j0 (its new pod could land on GPU 3 again).
    b.m.node_fault_on(&n_j0, "48", "3");
    b.pump();
    b.pass(3);
    assert!(isolations(&b).is_empty(), "held by the breaker");
    assert!(
        !restarted(&b).contains(&"j0".to_string()),
        "j0 waits for its device's isolation: {:?}",
        restarted(&b)
    );
    // The window moves on: the device is isolated, then j0 restarted.
    b.pass(model::WINDOW + 10);
    assert_eq!(isolations(&b), ["gpu-3"]);
    assert!(restarted(&b).contains(&"j0".to_string()));
    assert_eq!(b.cordons(), 1, "j0's node is never cordoned");
}

#[test]
fn without_dra_the_pods_the_agent_reports_holding_the_gpu_scope_a_job_level_fault() {
    // Device plugins, no DRA: the agent names the pods holding GPU 3.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    let (j0_pod, _) = b.pods_of("j0").into_iter().next().expect("j0's pod");
    b.m.holders.insert(
        ("n0".into(), "3".into()),
        vec![format!("{}/{j0_pod}", model::NS)],
    );
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert_eq!(restarted(&b), ["j0"], "only the job the agent named");
    // The way back: a reset-level fault keeps the node as its scope (a
    // device plugin cannot take one GPU out): cordoned, every job.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    let (j0_pod, _) = b.pods_of("j0").into_iter().next().expect("j0's pod");
    b.m.holders.insert(
        ("n0".into(), "3".into()),
        vec![format!("{}/{j0_pod}", model::NS)],
    );
    b.m.node_fault_on("n0", "48", "3");
    b.pump();
    assert_eq!(b.cordons(), 1);
    assert_eq!(restarted(&b), ["j0", "j1"]);
    // An empty list (a lookup that found nothing) is not trusted to mean
    // "no job": the node's jobs.
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    b.m.holders.insert(("n0".into(), "3".into()), Vec::new());
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert_eq!(restarted(&b), ["j0", "j1"]);
}

#[test]
fn a_tenant_event_naming_pods_does_not_scope_anything() {
    // The holders of an untrusted fault are never read: a tenant's Event
    // naming another tenant's pod restarts only its own namespace's jobs,
    // as every tenant fault does (trust.rs); here it has none.
    let mut f = crate::fault::Fault::new(
        crate::fault::FaultSource::NvidiaXid,
        "13",
        chrono::Utc::now(),
    );
    f.node = Some("n0".into());
    f.device = Some("3".into());
    f.holders = Some(vec!["ml/j0-5".to_string()].into_boxed_slice());
    f.trusted = false;
    let b = Bed::on(Model::new(1, 2, 1), None);
    let scope = b
        .core
        .device_scope(&f, crate::fault::Level::RestartJob, b.m.now());
    assert_eq!(scope, super::super::devices::DeviceScope::Node);
    f.trusted = true;
    let scope = b
        .core
        .device_scope(&f, crate::fault::Level::RestartJob, b.m.now());
    assert!(
        matches!(scope, super::super::devices::DeviceScope::Pods(_)),
        "{scope:?}"
    );
}

#[test]
fn a_policy_with_device_scope_node_takes_a_gpus_fault_for_its_nodes() {
    let mut spec = model::default_policy_spec();
    spec["deviceScope"] = json!("Node");
    let mut b = Bed::on(Model::new(1, 2, 1), Some(spec));
    let ins = dra_inputs(&b);
    b.feed(ins);
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    assert_eq!(
        restarted(&b),
        ["j0", "j1"],
        "every job of the policy on the node"
    );
}

#[test]
fn a_server_that_never_says_what_it_serves_holds_device_faults_at_most_the_bound() {
    // The model's start says DRA is not served; here that answer never
    // came (discovery asked again while the server fails).
    let mut b = Bed::on(Model::new(1, 2, 1), None);
    b.core.store.dra.served = None;
    b.core.store.dra.served_at = None;
    b.m.node_fault_on("n0", "13", "3");
    b.pump();
    b.pass(2);
    assert!(restarted(&b).is_empty(), "waits to learn what is served");
    let bound = super::super::store::dra::LIST_BOUND.as_secs() as i64;
    b.pass(bound);
    assert_eq!(
        restarted(&b),
        ["j0", "j1"],
        "the node's jobs past the bound"
    );
}
