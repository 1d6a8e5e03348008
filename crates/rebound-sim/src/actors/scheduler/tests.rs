//! Tests of the scheduler's scope, tolerations, bind rate and fit.

use super::fit::tolerates;
use super::*;

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        ..Default::default()
    }
}

fn state(scope: Option<Scope>) -> State {
    State::new(scope)
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("node")
}

fn pod(name: &str, scheduler: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c"}]});
    if let Some(s) = scheduler {
        spec["schedulerName"] = json!(s);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ml"}, "spec": spec}))
        .expect("pod")
}

#[test]
fn a_scoped_scheduler_serves_only_its_pods_on_its_nodes() {
    let scope = Scope {
        scheduler_name: "sim".into(),
        node_prefix: "rb-x-".into(),
    };
    let mut st = state(Some(scope));
    st.on_node(&node("rb-x-0000"));
    st.on_node(&node("kind-control-plane"));
    assert_eq!(st.nodes.len(), 1, "real nodes are not the simulation's");
    st.on_pod(&pod("mine", Some("sim")));
    st.on_pod(&pod("default-scheduler", None));
    st.on_pod(&pod("other", Some("volcano")));
    assert_eq!(st.pending.keys().collect::<Vec<_>>(), vec!["ml/mine"]);
    let p = st.pending.get("ml/mine").cloned().expect("pending");
    assert_eq!(st.choose(&p).as_deref(), Some("rb-x-0000"));
    // Unscoped (the embedded cluster): every pod, every node.
    let mut all = state(None);
    all.on_node(&node("kind-control-plane"));
    all.on_pod(&pod("default-scheduler", None));
    all.on_pod(&pod("other", Some("volcano")));
    assert_eq!((all.nodes.len(), all.pending.len()), (1, 2));
}

#[test]
fn tolerations_match_like_the_real_scheduler() {
    let t = taint("rebound.dev/fault", "NoSchedule");
    assert!(!tolerates(&[], &t));
    let exists_all = Toleration {
        operator: Some("Exists".into()),
        ..Default::default()
    };
    assert!(tolerates(&[exists_all], &t));
    let by_key = Toleration {
        key: Some("rebound.dev/fault".into()),
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    assert!(
        !tolerates(std::slice::from_ref(&by_key), &t),
        "effect differs"
    );
}

#[test]
fn the_bind_rate_allows_a_burst_then_the_rate() {
    let t0 = Instant::now();
    let mut b = Bucket::new(50.0, 100, t0);
    assert_eq!((0..150).filter(|_| b.take(t0)).count(), 100, "the burst");
    assert!(b.wait() > Duration::ZERO);
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(
        (0..150).filter(|_| b.take(t1)).count(),
        50,
        "then 50 a second"
    );
    let mut free = Bucket::new(0.0, 0, t0);
    assert!((0..10_000).all(|_| free.take(t0)), "0: no limit");
}

#[test]
fn cordoned_or_tainted_nodes_do_not_fit() {
    let pod = PendingPod {
        ns: "a".into(),
        name: "p".into(),
        requests: HashMap::from([("pods".into(), 1), ("nvidia.com/gpu".into(), 8)]),
        node_selector: BTreeMap::new(),
        tolerations: vec![],
        group: None,
    };
    let mut n = NodeView {
        ready: true,
        allocatable: HashMap::from([("pods".into(), 110), ("nvidia.com/gpu".into(), 8)]),
        ..Default::default()
    };
    assert!(fits(&n, &pod));
    n.used.insert("nvidia.com/gpu".into(), 1);
    assert!(!fits(&n, &pod), "GPUs exhausted");
    n.used.clear();
    n.unschedulable = true;
    assert!(!fits(&n, &pod));
    n.unschedulable = false;
    n.taints.push(taint("x", "NoSchedule"));
    assert!(!fits(&n, &pod));
    n.taints[0].effect = "PreferNoSchedule".into();
    assert!(fits(&n, &pod));
}
