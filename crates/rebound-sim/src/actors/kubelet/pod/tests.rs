//! The pod state machine on a fake clock: start sequences, restart rules,
//! the in-place restart of a wired pod, deletion.

use super::*;
use crate::actors::kubelet::spec::parse_pod;
use crate::actors::kubelet::status::Transitions;
use rebound::inplace::Verdict;
use serde_json::{Value, json};

const S: Duration = Duration::from_secs(1);

fn wired() -> Value {
    json!({
        "metadata": {"name": "w-0", "namespace": "ml", "labels": {"job": "train"}},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [
                {"name": "setup", "image": "busybox"},
                {"name": "rebound-restart-agent", "image": "rebound", "restartPolicy": "Always",
                 "restartPolicyRules": [{"action": "RestartAllContainers",
                                         "exitCodes": {"operator": "In", "values": [87]}}],
                 "startupProbe": {"httpGet": {"path": "/barrier", "port": 9079}},
                 "env": [{"name": "REBOUND_JOB_API", "value": "kubeflow.org/v1/pytorchjobs"},
                         {"name": "REBOUND_JOB_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job']"}}},
                         {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]},
            ],
            "containers": [{"name": "pytorch", "image": "trainer",
                            "readinessProbe": {"exec": {"command": ["true"]}}}],
        },
    })
}

fn simple(policy: &str, rules: Value) -> Value {
    json!({"spec": {"restartPolicy": policy, "containers": [
        {"name": "c", "image": "i", "restartPolicy": if rules.as_array().is_some_and(|r| !r.is_empty()) { json!(policy) } else { Value::Null },
         "restartPolicyRules": rules}]}})
}

struct Harness {
    pod: PodRun,
    costs: PodCosts,
    t0: Instant,
    fx: Vec<Effect>,
    tr: Transitions,
}

impl Harness {
    fn new(pod: Value, costs: PodCosts) -> Harness {
        let t0 = Instant::now();
        let mut h = Harness {
            pod: PodRun::new(
                parse_pod(&pod),
                "10.0.0.1".into(),
                t0,
                &costs,
                Duration::ZERO,
            ),
            costs,
            t0,
            fx: Vec::new(),
            tr: Transitions::default(),
        };
        h.at(Duration::ZERO);
        h
    }

    fn t(&self) -> Timing<'_> {
        Timing {
            costs: &self.costs,
            restart_delay: S,
        }
    }

    fn at(&mut self, d: Duration) {
        let now = self.t0 + d;
        let t = Timing {
            costs: &self.costs,
            restart_delay: S,
        };
        self.pod.advance(now, t, &mut self.fx);
    }

    fn exit(&mut self, d: Duration, name: &str, code: i32) -> bool {
        let t = Timing {
            costs: &self.costs,
            restart_delay: S,
        };
        self.pod
            .exited(name, code, "Error", self.t0 + d, t, &mut self.fx)
    }

    fn verdict(&mut self, d: Duration, run: u64, v: Verdict) {
        let t = Timing {
            costs: &self.costs,
            restart_delay: S,
        };
        self.pod.agent_verdict(run, v, self.t0 + d, t, &mut self.fx);
    }

    fn status(&mut self) -> Value {
        serde_json::to_value(self.pod.status(&mut self.tr, &[])).expect("json")
    }

    fn cond(&mut self, t: &str) -> String {
        let st = self.status();
        st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| "absent".into())
    }

    fn take(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.fx)
    }
}

fn state_of(st: &Value, list: &str, i: usize) -> String {
    let s = &st[list][i]["state"];
    ["waiting", "running", "terminated"]
        .into_iter()
        .find(|k| !s[*k].is_null())
        .unwrap_or("none")
        .to_owned()
}

#[test]
fn a_pod_without_costs_runs_ready_in_one_step() {
    let mut h = Harness::new(simple("Always", json!([])), PodCosts::default());
    let st = h.status();
    assert_eq!(st["phase"], "Running");
    assert_eq!(state_of(&st, "containerStatuses", 0), "running");
    assert_eq!(st["containerStatuses"][0]["ready"], true);
    assert_eq!(st["containerStatuses"][0]["started"], true);
    assert!(st["podIP"].is_string());
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    ] {
        assert_eq!(h.cond(c), "True", "{c}");
    }
    assert_eq!(
        h.cond("AllContainersRestarting"),
        "absent",
        "no rule, no condition"
    );
    assert!(st.get("initContainerStatuses").is_none());
    assert_eq!(h.pod.next_due(), None);
}

#[test]
fn a_wired_pod_starts_in_order_and_waits_at_the_barrier_then_restarts_in_place() {
    let mut h = Harness::new(wired(), PodCosts::round());
    // Devices (1 s) and sandbox (2 s) first.
    assert_eq!(h.status()["phase"], "Pending");
    assert_eq!(h.cond("PodReadyToStartContainers"), "False");
    assert_eq!(h.cond("Initialized"), "False");
    assert_eq!(h.pod.next_due(), Some(h.t0 + 3 * S));
    h.at(3 * S);
    assert_eq!(h.cond("PodReadyToStartContainers"), "True");
    // setup: image + start (2 s), then runs 1 s to completion.
    h.at(5 * S);
    assert_eq!(state_of(&h.status(), "initContainerStatuses", 0), "running");
    assert_eq!(state_of(&h.status(), "initContainerStatuses", 1), "waiting");
    h.at(6 * S);
    let st = h.status();
    assert_eq!(
        st["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(st["initContainerStatuses"][0]["ready"], true);
    // The agent starts 2 s later and holds the barrier: started false.
    h.at(8 * S);
    let fx = h.take();
    assert!(
        matches!(&fx[..], [Effect::StartAgent { run: 1, wiring }] if wiring.job.name == "train"),
        "{fx:?}"
    );
    let st = h.status();
    assert_eq!(state_of(&st, "initContainerStatuses", 1), "running");
    assert_eq!(st["initContainerStatuses"][1]["started"], false);
    assert_eq!(
        st["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    assert_eq!(st["phase"], "Pending");
    h.at(100 * S);
    assert_eq!(
        state_of(&h.status(), "containerStatuses", 0),
        "waiting",
        "still at the barrier"
    );
    h.verdict(100 * S, 1, Verdict::Hold);
    assert_eq!(h.pod.stage, Stage::Init(1));
    // Open: the worker starts (image + start), then its readiness probe.
    h.verdict(101 * S, 1, Verdict::Open);
    assert_eq!(h.cond("Initialized"), "True");
    h.at(103 * S);
    let st = h.status();
    assert_eq!(st["phase"], "Running");
    assert_eq!(st["containerStatuses"][0]["ready"], false);
    assert_eq!(h.cond("Ready"), "False");
    h.at(105 * S);
    assert_eq!(h.cond("Ready"), "True");
    assert_eq!(h.cond("AllContainersRestarting"), "False");
    let ip = h.status()["podIP"].clone();

    // The job moved on: the agent exits 87, the rule restarts everything.
    h.take();
    h.verdict(200 * S, 1, Verdict::Exit);
    assert!(h.take().contains(&Effect::StopAgent));
    assert_eq!(h.cond("AllContainersRestarting"), "True");
    let st = h.status();
    let c = st["conditions"]
        .as_array()
        .expect("conds")
        .iter()
        .find(|c| c["type"] == "AllContainersRestarting")
        .cloned()
        .expect("cond");
    assert_eq!(c["reason"], "RestartAllContainersStarted");
    assert_eq!(
        st["initContainerStatuses"][1]["state"]["terminated"]["exitCode"],
        87
    );
    assert_eq!(h.cond("Ready"), "False");
    // Killed without grace (0.5 s); then init containers again.
    h.at(200 * S + S / 2);
    let st = h.status();
    assert_eq!(h.cond("AllContainersRestarting"), "False");
    assert_eq!(h.cond("Initialized"), "True", "stays initialized");
    assert_eq!(st["phase"], "Pending");
    assert_eq!(
        st["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        KILLED
    );
    assert_eq!(
        st["initContainerStatuses"][1]["lastState"]["terminated"]["exitCode"],
        87
    );
    assert_eq!(
        st["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        0
    );
    assert_eq!(st["podIP"], ip, "same sandbox, same IP");
    h.at(210 * S);
    let fx = h.take();
    assert!(
        matches!(&fx[..], [Effect::StartAgent { run: 2, .. }]),
        "{fx:?}"
    );
    let st = h.status();
    assert_eq!(st["initContainerStatuses"][0]["restartCount"], 1);
    assert_eq!(st["initContainerStatuses"][1]["restartCount"], 1);
    assert_eq!(
        st["initContainerStatuses"][1]["started"], false,
        "barrier again"
    );
    assert_eq!(state_of(&st, "containerStatuses", 0), "waiting");
    // A late verdict of the old run changes nothing.
    h.verdict(211 * S, 1, Verdict::Open);
    assert_eq!(h.status()["initContainerStatuses"][1]["started"], false);
    h.verdict(212 * S, 2, Verdict::Open);
    h.at(216 * S);
    let st = h.status();
    assert_eq!(st["phase"], "Running");
    assert_eq!(st["containerStatuses"][0]["restartCount"], 1);
    assert_eq!(h.cond("Ready"), "True");
}

#[test]
fn a_restart_rule_restarts_the_container_and_other_codes_follow_the_policy() {
    let rules = json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]);
    let mut h = Harness::new(simple("Never", rules), PodCosts::default());
    assert!(h.exit(S, "c", 42));
    assert_eq!(state_of(&h.status(), "containerStatuses", 0), "terminated");
    assert_eq!(
        h.pod.next_due(),
        Some(h.t0 + 2 * S),
        "after the restart delay"
    );
    h.at(2 * S);
    let st = h.status();
    assert_eq!(state_of(&st, "containerStatuses", 0), "running");
    assert_eq!(st["containerStatuses"][0]["restartCount"], 1);
    assert_eq!(
        st["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        42
    );
    // Another code: the container's policy Never; the pod fails.
    assert!(h.exit(3 * S, "c", 1));
    let st = h.status();
    assert_eq!(st["phase"], "Failed");
    assert_eq!(h.cond("Ready"), "False");
    assert_eq!(h.pod.next_due(), None);
    assert!(!h.exit(4 * S, "c", 1), "not running");
}

#[test]
fn policies_decide_without_rules() {
    let mut h = Harness::new(simple("OnFailure", json!([])), PodCosts::default());
    h.exit(S, "c", 3);
    h.at(2 * S);
    assert_eq!(h.status()["containerStatuses"][0]["restartCount"], 1);
    h.exit(3 * S, "c", 0);
    assert_eq!(h.status()["phase"], "Succeeded");
    let st = h.status();
    let ready = st["conditions"]
        .as_array()
        .expect("c")
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .expect("ready");
    assert_eq!(ready["reason"], "PodCompleted");
    let mut a = Harness::new(simple("Always", json!([])), PodCosts::default());
    a.exit(S, "c", 0);
    assert_eq!(
        a.status()["phase"],
        "Running",
        "Always restarts even a success"
    );
}

#[test]
fn a_failed_init_container_fails_a_never_pod_and_is_retried_otherwise() {
    let pod = |policy: &str| {
        json!({"spec": {"restartPolicy": policy,
            "initContainers": [{"name": "setup", "image": "b"}],
            "containers": [{"name": "c", "image": "i"}]}})
    };
    let costs = PodCosts {
        init: 10 * S,
        ..PodCosts::default()
    };
    let mut h = Harness::new(pod("Never"), costs.clone());
    assert_eq!(state_of(&h.status(), "initContainerStatuses", 0), "running");
    h.exit(S, "setup", 1);
    assert_eq!(h.status()["phase"], "Failed");
    let mut h = Harness::new(pod("OnFailure"), costs);
    h.exit(S, "setup", 1);
    h.at(2 * S);
    assert_eq!(h.status()["initContainerStatuses"][0]["restartCount"], 1);
    h.at(12 * S);
    assert_eq!(h.status()["phase"], "Running");
}

#[test]
fn a_deleted_pod_stops_within_its_grace_period_then_is_confirmed() {
    let costs = PodCosts {
        stop: 60 * S,
        ..PodCosts::default()
    };
    let h = Harness::new(simple("Always", json!([])), costs);
    let t = h.t0;
    let timing = h.t();
    let mut fx = Vec::new();
    let mut pod = h.pod.clone();
    pod.delete(t, timing, &mut fx);
    assert!(fx.is_empty());
    assert_eq!(
        pod.next_due(),
        Some(t + 30 * S),
        "the grace period caps the stop"
    );
    pod.advance(t + 30 * S, timing, &mut fx);
    assert_eq!(fx, vec![Effect::Delete]);
    pod.delete(t + 31 * S, timing, &mut fx);
    assert_eq!(fx.len(), 1, "confirmed once");
}

#[test]
fn an_agent_without_wiring_crashes_and_restarts_like_the_real_binary() {
    let mut pod = wired();
    pod["spec"]["initContainers"][1]["env"] = json!([]);
    let mut h = Harness::new(pod, PodCosts::default());
    let st = h.status();
    assert_eq!(
        st["initContainerStatuses"][1]["state"]["terminated"]["exitCode"],
        2
    );
    assert_eq!(state_of(&st, "containerStatuses", 0), "waiting");
    assert!(
        h.take()
            .iter()
            .all(|f| !matches!(f, Effect::StartAgent { .. }))
    );
    h.at(S);
    assert_eq!(h.status()["initContainerStatuses"][1]["restartCount"], 1);
}
