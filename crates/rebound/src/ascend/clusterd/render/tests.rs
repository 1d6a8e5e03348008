use super::*;
use crate::ascend::clusterd::view::RecoveringJob;
use crate::fault::ascend::{CodeFault, ResourceDevices};
use crate::fault::{Fault, FaultSource};
use chrono::{TimeZone, Utc};

/// A node as a large Ascend cluster shows it: 8 chips, `faulty` of them
/// with three codes each (times and levels), SuperPoD fields set.
fn node_info(node: &str, faulty: u32, level: &str) -> DeviceInfo {
    let t = Utc.timestamp_opt(1_736_900_000, 0).single();
    DeviceInfo {
        node: node.into(),
        update_time: t,
        super_pod_id: Some(3),
        server_index: Some(7),
        resources: vec![ResourceDevices {
            resource: "huawei.com/Ascend910".into(),
            available: (0..8).map(|c| format!("Ascend910-{c}")).collect(),
            faults: (0..faulty)
                .map(|c| ChipFault {
                    fault_type: "CardUnhealthy".into(),
                    npu_name: format!("Ascend910-{c}"),
                    level: Some(level.into()),
                    codes: ["80E18402", "80C98009", "8C084E00"]
                        .iter()
                        .map(|code| CodeFault {
                            code: (*code).into(),
                            level: Some(level.into()),
                            time: t,
                        })
                        .collect(),
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn cluster(n: usize) -> ViewState {
    let mut v = ViewState::default();
    for i in 0..n {
        let name = format!("node-{i:05}");
        let faulty = (i % 4) as u32; // 0..3 faulty chips
        v.set_device_info(&name, Some(node_info(&name, faulty, "NotHandleFault")));
        v.set_node_faults(&name, vec![]);
    }
    v
}

fn check_shards(r: &Rendered, nodes: usize, bound: usize) {
    let mut seen = BTreeMap::new();
    for (i, value) in &r.device_shards {
        let name = format!("{DEVICE_PREFIX}{i}");
        assert!(
            name.len() + value.len() <= bound,
            "shard {i} has {} bytes > {bound}",
            name.len() + value.len()
        );
        let members = shard_nodes(value);
        assert!(members.len() <= MAX_NODES_PER_SHARD);
        for m in members {
            assert!(seen.insert(m, *i).is_none(), "a node in two shards");
        }
    }
    assert_eq!(seen.len(), nodes, "every node in exactly one shard");
    assert!(r.assignment.too_big.is_empty());
}

#[test]
fn twenty_five_hundred_nodes_shard_within_the_bound() {
    let v = cluster(2500);
    let r = render(&v, &Assignment::default(), MAX_BYTES);
    check_shards(&r, 2500, MAX_BYTES);
    // ClusterD's count rule (1000 per shard) holds at least.
    assert!(r.device_shards.len() >= 3);
    assert!(r.node_cm.len() + NODE_CM.len() <= MAX_BYTES);
    assert_eq!(r.node_cm_dropped, 0);
    // A smaller bound shards by bytes, not by count.
    let small = 96 * 1024;
    let r = render(&v, &Assignment::default(), small);
    check_shards(&r, 2500, small);
    assert!(
        r.device_shards.len() > 3,
        "{} shards",
        r.device_shards.len()
    );
}

#[test]
fn one_node_changing_rewrites_one_shard() {
    let mut v = cluster(2500);
    let r1 = render(&v, &Assignment::default(), MAX_BYTES);
    // node-01235 had 3 faulty chips; they clear.
    v.set_device_info(
        "node-01235",
        Some(node_info("node-01235", 0, "NotHandleFault")),
    );
    let r2 = render(&v, &r1.assignment, MAX_BYTES);
    check_shards(&r2, 2500, MAX_BYTES);
    let changed: Vec<usize> = r2
        .device_shards
        .iter()
        .filter(|(i, s)| r1.device_shards.get(i) != Some(s))
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        changed,
        vec![r1.assignment.of["mindx-dl-deviceinfo-node-01235"]]
    );
    assert_eq!(r1.assignment.of, r2.assignment.of, "no node moved");
}

#[test]
fn a_node_that_outgrows_its_shard_moves_and_no_other_does() {
    let v = cluster(30);
    let bound = 24 * 1024;
    let r1 = render(&v, &Assignment::default(), bound);
    check_shards(&r1, 30, bound);
    // Grow a node of shard 0 (not its last) far beyond its share.
    let key = r1
        .assignment
        .of
        .iter()
        .find(|(_, i)| **i == 0)
        .map(|(k, _)| k.clone())
        .unwrap();
    let node = key.strip_prefix(DEVICEINFO_PREFIX).unwrap().to_string();
    let mut big = node_info(&node, 8, "SeparateNPU");
    for f in &mut big.resources[0].faults {
        for k in 0..20 {
            f.codes.push(CodeFault {
                code: format!("8C0{k:05}"),
                level: Some("SeparateNPU".into()),
                time: None,
            });
        }
    }
    let mut v2 = v.clone();
    v2.set_device_info(&node, Some(big));
    let r2 = render(&v2, &r1.assignment, bound);
    check_shards(&r2, 30, bound);
    assert_ne!(r2.assignment.of[&key], 0, "the grown node moved");
    for (k, i) in &r1.assignment.of {
        if *k != key {
            assert_eq!(r2.assignment.of.get(k), Some(i), "{k} moved");
        }
    }
}

#[test]
fn levels_follow_rebound_and_keep_the_plugins_name_when_they_agree() {
    assert_eq!(
        level_name(Some(Level::RestartJob), Some("RestartBusiness")),
        "RestartBusiness"
    );
    assert_eq!(
        level_name(Some(Level::PreSeparate), Some("SeparateNPU")),
        "PreSeparateNPU"
    );
    assert_eq!(level_name(Some(Level::Separate), None), "SeparateNPU");
    assert_eq!(level_name(None, Some("FreeRestartNPU")), "FreeRestartNPU");
    assert_eq!(node_level_name(Level::ResetDevice), "SeparateFault");
    assert_eq!(node_level_name(Level::RestartJob), "NotHandleFault");
    assert_eq!(node_status(Some(Level::RestartJob)), "Healthy");
}

#[test]
fn a_separated_chip_is_unhealthy_and_the_node_too() {
    let mut v = ViewState::default();
    let mut info = node_info("n1", 0, "");
    info.resources[0].faults.push(ChipFault {
        fault_type: "CardUnhealthy".into(),
        npu_name: "Ascend910-3".into(),
        level: Some("RestartNPU".into()),
        codes: vec![CodeFault {
            code: "80E18402".into(),
            level: Some("RestartNPU".into()),
            time: Utc.timestamp_opt(1_736_900_000, 0).single(),
        }],
    });
    v.set_device_info("n1", Some(info));
    let mut f = Fault::new(FaultSource::AscendNpu, "80E18402", Utc::now());
    f.node = Some("n1".into());
    f.device = Some("3".into());
    // rebound's classification says Separate (the plugin said RestartNPU).
    assert!(v.note_level(&f, Level::Separate));
    let n = &v.nodes["n1"];
    let d = device_entry(n).unwrap();
    let list = &d["DeviceList"];
    assert_eq!(list["huawei.com/Ascend910-Unhealthy"], "Ascend910-3");
    assert!(
        !list["huawei.com/Ascend910"]
            .as_str()
            .unwrap()
            .contains("Ascend910-3")
    );
    let faults: serde_json::Value =
        serde_json::from_str(list["huawei.com/Ascend910-Fault"].as_str().unwrap()).unwrap();
    assert_eq!(faults[0]["fault_handling"], "SeparateNPU");
    assert_eq!(
        faults[0]["fault_time_and_level_map"]["80E18402"]["fault_time"],
        1_736_900_000_000i64
    );
    assert_eq!(d["CmName"], "mindx-dl-deviceinfo-n1");
    assert_eq!(d["SuperPodID"], 3);
    let e = node_entry("n1", n);
    assert_eq!(e["NodeStatus"], "UnHealthy");
    assert_eq!(
        e["FaultDevList"][0],
        json!({"DeviceType": "NPU", "DeviceId": 3, "FaultCode": ["80E18402"], "FaultLevel": "SeparateFault"})
    );
    // A classification lowers it to PreSeparate: the chip stays available.
    assert!(v.note_level(&f, Level::PreSeparate));
    let n = &v.nodes["n1"];
    assert_eq!(node_entry("n1", n)["NodeStatus"], "PreSeparate");
    assert_eq!(
        device_entry(n).unwrap()["DeviceList"]["huawei.com/Ascend910-Unhealthy"],
        ""
    );
}

#[test]
fn fault_jobs_group_nodes_by_superpod() {
    let mut v = cluster(2);
    v.set_recovering_job(RecoveringJob {
        id: "uid-9".into(),
        nodes: vec!["node-00000".into(), "gone".into()],
        fault_time: Utc.timestamp_opt(1_736_900_000, 0).single().unwrap(),
        started_at: Utc::now(),
        done_at: None,
    });
    let j = fault_jobs(&v);
    let val: serde_json::Value = serde_json::from_str(&j["uid-9"]).unwrap();
    assert_eq!(val["3"]["NodeNames"], json!(["node-00000"]));
    assert_eq!(val["-1"]["NodeNames"], json!(["gone"]));
    assert_eq!(val["3"]["FaultTimes"], 1_736_900_000_000i64);
    assert_eq!(val["3"]["JobId"], "uid-9");
}

#[test]
fn an_oversized_node_view_leaves_out_healthy_nodes_first() {
    let mut v = cluster(400);
    let mut f = Fault::new(FaultSource::AscendNpu, "80E18402", Utc::now());
    f.node = Some("node-00399".into());
    f.device = Some("2".into());
    assert!(v.note_level(&f, Level::Separate));
    let full = render(&v, &Assignment::default(), MAX_BYTES);
    assert_eq!(full.node_cm_dropped, 0);
    let bound = full.node_cm.len() / 2;
    let r = render(&v, &Assignment::default(), bound);
    assert!(r.node_cm.len() + NODE_CM.len() <= bound);
    assert!(r.node_cm_dropped > 0);
    let kept: serde_json::Value = serde_json::from_str(&r.node_cm).unwrap();
    assert_eq!(
        kept["mindx-dl-nodeinfo-node-00399"]["NodeStatus"],
        "UnHealthy"
    );
}
