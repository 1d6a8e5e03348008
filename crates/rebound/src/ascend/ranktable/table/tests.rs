use super::*;
use serde_json::{Value, json};

fn inst(pod: &str, server: &str, chips: &[u32]) -> Instance {
    Instance {
        pod_name: pod.into(),
        server_id: server.into(),
        devices: chips
            .iter()
            .map(|c| Device {
                device_id: c.to_string(),
                device_ip: format!("192.168.1.{}", c + 10),
            })
            .collect(),
    }
}

fn member(pod: &str, hint: Option<u64>, server: &str, chips: &[u32]) -> Member {
    Member {
        pod: pod.into(),
        group: 0,
        hint,
        instance: inst(pod, server, chips),
    }
}

fn worker(replicas: u32, npus: u32) -> Vec<Group> {
    vec![Group {
        name: "worker".into(),
        replicas,
        npus_per_pod: npus,
    }]
}

fn parse(t: &Table) -> Value {
    serde_json::from_str(&t.json).expect("valid JSON")
}

#[test]
fn v2_has_hccl_controllers_shape_and_rank_ids() {
    let ms = [
        member("vj-worker-1", Some(1), "10.0.0.2", &[0, 1]),
        member("vj-worker-0", Some(0), "10.0.0.1", &[2, 3]),
    ];
    let t = build(Format::V2, "vj", &worker(2, 2), &ms);
    assert_eq!(t.status, Status::Completed);
    assert_eq!(
        parse(&t),
        json!({
            "status": "completed",
            "server_list": [
                {"device": [
                    {"device_id": "2", "device_ip": "192.168.1.12", "rank_id": "0"},
                    {"device_id": "3", "device_ip": "192.168.1.13", "rank_id": "1"}],
                 "server_id": "10.0.0.1"},
                {"device": [
                    {"device_id": "0", "device_ip": "192.168.1.10", "rank_id": "2"},
                    {"device_id": "1", "device_ip": "192.168.1.11", "rank_id": "3"}],
                 "server_id": "10.0.0.2"}],
            "server_count": "2",
            "version": "1.0",
        })
    );
    // Go's field order, byte for byte at the start.
    assert!(t.json.starts_with(r#"{"status":"completed","server_list":[{"device":[{"device_id":"2","device_ip":"192.168.1.12","rank_id":"0"}"#), "{}", t.json);
}

#[test]
fn v1_has_hccl_controllers_shape() {
    let ms = [
        member("vj-worker-0", Some(0), "10.0.0.1", &[0]),
        member("vj-worker-1", Some(1), "10.0.0.2", &[0]),
    ];
    let t = build(Format::V1, "vj", &worker(2, 1), &ms);
    assert_eq!(
        parse(&t),
        json!({
            "status": "completed",
            "group_list": [{
                "instance_list": [
                    {"devices": [{"device_id": "0", "device_ip": "192.168.1.10"}], "pod_name": "vj-worker-0", "server_id": "10.0.0.1"},
                    {"devices": [{"device_id": "0", "device_ip": "192.168.1.10"}], "pod_name": "vj-worker-1", "server_id": "10.0.0.2"}],
                "group_name": "worker", "device_count": "2", "instance_count": "2"}],
            "group_count": "1",
        })
    );
    assert!(
        t.json
            .starts_with(r#"{"status":"completed","group_list":[{"instance_list":[{"devices":"#)
    );
}

#[test]
fn initializing_until_every_replica_is_known_and_lists_no_pod() {
    let one = [member("vj-worker-0", Some(0), "10.0.0.1", &[0])];
    for f in [Format::V1, Format::V2] {
        let t = build(f, "vj", &worker(2, 1), &one);
        assert_eq!(t.status, Status::Initializing);
        assert!(
            !t.json.contains("vj-worker-0") && !t.json.contains("10.0.0.1"),
            "{}",
            t.json
        );
        assert_eq!(parse(&t)["status"], "initializing");
    }
    let v2 = parse(&build(Format::V2, "vj", &worker(2, 1), &one));
    assert_eq!(v2["server_count"], "0");
    assert_eq!(v2["server_list"], json!([]));
    // No NPU group: nothing to wait for, never completed.
    assert_eq!(
        build(Format::V2, "vj", &worker(2, 0), &[]).status,
        Status::Initializing
    );
    // More pods than replicas (an old pod not yet gone): not complete.
    let three = [
        member("a", Some(0), "10.0.0.1", &[0]),
        member("b", Some(1), "10.0.0.1", &[1]),
        member("c", Some(2), "10.0.0.1", &[2]),
    ];
    assert_eq!(
        build(Format::V2, "vj", &worker(2, 1), &three).status,
        Status::Initializing
    );
}

#[test]
fn rank_order_is_stable_whatever_the_arrival_order() {
    let a = member("p-b", None, "10.0.0.2", &[0]);
    let b = member("p-a", None, "10.0.0.1", &[0]);
    let c = member("p-z", Some(0), "10.0.0.3", &[0]);
    let t1 = build(
        Format::V2,
        "p",
        &worker(3, 1),
        &[a.clone(), b.clone(), c.clone()],
    );
    let t2 = build(Format::V2, "p", &worker(3, 1), &[c, b, a]);
    assert_eq!(t1, t2);
    let servers: Vec<String> = parse(&t1)["server_list"]
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s["server_id"].as_str().unwrap_or_default().to_string())
        .collect();
    // The hinted pod first, then the others by name.
    assert_eq!(servers, ["10.0.0.3", "10.0.0.1", "10.0.0.2"]);
}

#[test]
fn rank_hints_follow_annotation_then_task_index_then_completion_index() {
    let groups = vec![
        Group {
            name: "master".into(),
            replicas: 1,
            npus_per_pod: 8,
        },
        Group {
            name: "ps".into(),
            replicas: 2,
            npus_per_pod: 0,
        },
        Group {
            name: "worker".into(),
            replicas: 3,
            npus_per_pod: 8,
        },
    ];
    assert_eq!(rank_hint(Some("7"), Some("1"), None, &groups, 2), Some(7));
    // Worker 1 comes after the master's one pod; the CPU task counts not.
    assert_eq!(rank_hint(None, Some("1"), None, &groups, 2), Some(2));
    assert_eq!(rank_hint(Some("x"), None, Some("4"), &groups, 0), Some(4));
    assert_eq!(rank_hint(None, None, None, &groups, 0), None);
    assert_eq!(expected(&groups), 4);
}

#[test]
fn bad_annotations_are_clear_errors_never_panics() {
    let ok = r#"{"pod_name":"p","server_id":"10.0.0.1","devices":[{"device_id":"0","device_ip":"192.168.1.1"}]}"#;
    assert!(parse_instance(ok).is_ok());
    let cases = [
        ("", "not the device plugin's JSON"),
        ("{}", "not the device plugin's JSON"),
        (
            r#"{"pod_name":"p","server_id":"node-1","devices":[{"device_id":"0","device_ip":"1.1.1.1"}]}"#,
            "server_id \"node-1\"",
        ),
        (
            r#"{"pod_name":"p","server_id":"10.0.0.1","devices":[]}"#,
            "0 devices",
        ),
        (
            r#"{"pod_name":"p","server_id":"10.0.0.1","devices":[{"device_id":"-1","device_ip":"1.1.1.1"}]}"#,
            "device_id \"-1\"",
        ),
        (
            r#"{"pod_name":"p","server_id":"10.0.0.1","devices":[{"device_id":"0","device_ip":"x"}]}"#,
            "device_ip \"x\"",
        ),
    ];
    for (raw, msg) in cases {
        let e = parse_instance(raw).expect_err(raw).to_string();
        assert!(e.contains(msg), "{raw}: {e}");
    }
}

#[test]
fn writes_only_what_changes_the_table() {
    let done = build(
        Format::V2,
        "p",
        &worker(1, 1),
        &[member("p", Some(0), "10.0.0.1", &[0])],
    );
    let init = build(Format::V2, "p", &worker(1, 1), &[]);
    let placeholder = r#"{"status":"initializing"}"#;
    assert!(!needs_write(Some(placeholder), &init));
    assert!(needs_write(Some(placeholder), &done));
    assert!(!needs_write(Some(&done.json), &done));
    assert!(needs_write(Some(&done.json), &init));
    assert!(needs_write(None, &init));
    assert!(needs_write(Some("garbage"), &init));
    assert_eq!(status_of(&done.json), Some(Status::Completed));
    assert_eq!(status_of("{\"status\":\"odd\"}"), None);
}
