use super::*;
use serde_json::json;

fn now() -> DateTime<Utc> {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

fn cm(ns: &str, cfg: &str, manual: Option<&str>) -> ConfigMap {
    let mut data = serde_json::Map::new();
    data.insert(DEVICEINFO_KEY.into(), json!(cfg));
    if let Some(m) = manual {
        data.insert(MANUALLY_SEPARATE_KEY.into(), json!(m));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "mindx-dl-deviceinfo-npu-node-1", "namespace": ns},
        "data": data,
    }))
    .unwrap()
}

fn cfg(list: serde_json::Value) -> String {
    json!({"DeviceInfo": {"DeviceList": list, "UpdateTime": 1718702470}, "CheckCode": "x"})
        .to_string()
}

#[test]
fn node_from_name() {
    let c = cm("kube-system", "{}", None);
    assert_eq!(deviceinfo_node(&c).as_deref(), Some("npu-node-1"));
    let mut other = c.clone();
    other.metadata.name = Some("mindx-dl-deviceinfo-".into());
    assert_eq!(deviceinfo_node(&other), None);
    other.metadata.name = Some("kube-root-ca.crt".into());
    assert_eq!(deviceinfo_node(&other), None);
    assert!(matches!(
        deviceinfo_faults(&other, now()),
        Err(AscendError::NotDeviceInfo { .. })
    ));
}

#[test]
fn healthy_node_has_no_faults() {
    let c = cm(
        "kube-system",
        &cfg(json!({"huawei.com/Ascend910": "Ascend910-0,Ascend910-1",
            "huawei.com/Ascend910-Fault": "[]", "huawei.com/Ascend910-Unhealthy": ""})),
        None,
    );
    assert!(deviceinfo_faults(&c, now()).unwrap().is_empty());
    let info = parse_deviceinfo(&c).unwrap();
    assert_eq!(info.resources[0].available, ["Ascend910-0", "Ascend910-1"]);
    assert_eq!(info.update_time, DateTime::from_timestamp(1718702470, 0));
}

#[test]
fn one_fault_per_chip_and_code_with_per_code_level_and_time() {
    let faults = json!([{"fault_type": "CardUnhealthy", "npu_name": "Ascend910-4",
        "large_model_fault_level": "SeparateNPU", "fault_level": "SeparateNPU",
        "fault_handling": "SeparateNPU", "fault_code": "A8028801,80E18401",
        "fault_time_and_level_map": {
            "80E18401": {"fault_time": 1744167455784_i64, "fault_level": "NotHandleFault"},
            "A8028801": {"fault_time": 1744167455784_i64, "fault_level": "SeparateNPU"}}}]);
    let c = cm(
        "kube-system",
        &cfg(json!({"huawei.com/Ascend910-Fault": faults.to_string(),
            "huawei.com/Ascend910-Unhealthy": "Ascend910-4"})),
        None,
    );
    let fs = deviceinfo_faults(&c, now()).unwrap();
    assert_eq!(
        fs.len(),
        2,
        "the Unhealthy listing is explained by the entry: {fs:?}"
    );
    assert_eq!(
        (fs[0].code.as_str(), fs[0].reason.as_deref()),
        ("A8028801", Some("SeparateNPU"))
    );
    assert_eq!(
        (fs[1].code.as_str(), fs[1].reason.as_deref()),
        ("80E18401", Some("NotHandleFault"))
    );
    for f in &fs {
        assert_eq!(f.source, FaultSource::AscendNpu);
        assert_eq!(f.device.as_deref(), Some("4"));
        assert_eq!(f.node.as_deref(), Some("npu-node-1"));
        assert!(
            f.message
                .as_deref()
                .is_some_and(|m| m.contains("Ascend910-4"))
        );
        assert_eq!(
            f.last_seen,
            DateTime::from_timestamp_millis(1744167455784).unwrap()
        );
        assert_eq!(f.first_seen, f.last_seen);
        assert!(f.trusted);
    }
}

#[test]
fn older_formats_are_read() {
    // fault_time_map (code → ms), no level map; and no times at all.
    let faults = json!([
        {"fault_type": "CardUnhealthy", "npu_name": "Ascend910-1", "fault_level": "RestartNPU",
         "fault_code": "80C98008", "fault_time_map": {"80C98008": 1744167455000_i64}},
        {"fault_type": "CardUnhealthy", "npu_name": "Ascend910-2", "fault_handling": "",
         "fault_level": "SeparateNPU", "fault_code": "80e18402"}]);
    let c = cm(
        "kube-system",
        &cfg(json!({"huawei.com/Ascend910-Fault": faults.to_string()})),
        None,
    );
    let fs = deviceinfo_faults(&c, now()).unwrap();
    assert_eq!(fs.len(), 2);
    assert_eq!(
        (fs[0].code.as_str(), fs[0].reason.as_deref()),
        ("80C98008", Some("RestartNPU"))
    );
    assert_eq!(
        fs[0].last_seen,
        DateTime::from_timestamp_millis(1744167455000).unwrap()
    );
    assert_eq!(
        (fs[1].code.as_str(), fs[1].reason.as_deref()),
        ("80E18402", Some("SeparateNPU"))
    );
    assert_eq!(
        fs[1].last_seen,
        DateTime::from_timestamp(1718702470, 0).unwrap(),
        "UpdateTime"
    );
}

#[test]
fn unexplained_unhealthy_lists_and_node_faults() {
    let faults = json!([{"fault_type": "NodeUnhealthy", "npu_name": "", "fault_code": ""}]);
    let c = cm(
        "kube-system",
        &cfg(json!({"huawei.com/Ascend310P": "Ascend310P-0",
            "huawei.com/Ascend310P-Fault": faults.to_string(),
            "huawei.com/Ascend310P-Unhealthy": "Ascend310P-1",
            "huawei.com/Ascend310P-NetworkUnhealthy": "Ascend310P-2"})),
        None,
    );
    let fs = deviceinfo_faults(&c, now()).unwrap();
    let got: Vec<_> = fs
        .iter()
        .map(|f| (f.code.as_str(), f.device.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("NodeUnhealthy", None),
            ("CardUnhealthy", Some("1")),
            ("CardNetworkUnhealthy", Some("2"))
        ]
    );
}

#[test]
fn manually_separated_chips() {
    let c = cm(
        "kube-system",
        &cfg(json!({})),
        Some("Ascend910-0, Ascend910-5"),
    );
    let fs = deviceinfo_faults(&c, now()).unwrap();
    assert_eq!(fs.len(), 2);
    assert_eq!(
        (fs[0].code.as_str(), fs[0].device.as_deref()),
        ("ManuallySeparateNPU", Some("0"))
    );
    assert_eq!(fs[1].device.as_deref(), Some("5"));
}

#[test]
fn outside_kube_system_is_untrusted() {
    let c = cm("team-a", &cfg(json!({})), Some("Ascend910-0"));
    assert!(!deviceinfo_faults(&c, now()).unwrap()[0].trusted);
}

#[test]
fn broken_json_is_an_error_not_a_panic() {
    let c = cm("kube-system", "{\"DeviceInfo\":", None);
    let err = deviceinfo_faults(&c, now()).unwrap_err();
    assert!(matches!(err, AscendError::Json { .. }));
    assert!(
        err.to_string()
            .contains("kube-system/mindx-dl-deviceinfo-npu-node-1"),
        "{err}"
    );
    let c = cm(
        "kube-system",
        &cfg(json!({"huawei.com/Ascend910-Fault": "[{"})),
        None,
    );
    assert!(matches!(
        deviceinfo_faults(&c, now()),
        Err(AscendError::FaultList { key, .. }) if key == "huawei.com/Ascend910-Fault"
    ));
    let mut c = c;
    c.data = None;
    assert!(matches!(
        deviceinfo_faults(&c, now()),
        Err(AscendError::MissingKey { .. })
    ));
}

#[test]
fn nulls_and_unknown_fields_are_tolerated() {
    let c = cm(
        "kube-system",
        r#"{"DeviceInfo":{"DeviceList":null,"UpdateTime":null},"Extra":1}"#,
        None,
    );
    assert!(deviceinfo_faults(&c, now()).unwrap().is_empty());
    let faults = r#"[{"npu_name":"npu-3","fault_code":["8C084E00"],"fault_time_and_level_map":null,"new_field":true}]"#;
    let c = cm(
        "kube-system",
        &cfg(json!({"huawei.com/npu-Fault": faults})),
        None,
    );
    let fs = deviceinfo_faults(&c, now()).unwrap();
    assert_eq!(
        (fs[0].code.as_str(), fs[0].device.as_deref()),
        ("8C084E00", Some("3"))
    );
    assert_eq!(fs[0].reason, None);
}

#[test]
fn healthy_follows_the_plugin_levels() {
    let with = |faults: serde_json::Value, unhealthy: &str| {
        let c = cm(
            "kube-system",
            &cfg(json!({"huawei.com/Ascend910-Fault": faults.to_string(),
                "huawei.com/Ascend910-Unhealthy": unhealthy})),
            None,
        );
        parse_deviceinfo(&c).unwrap().healthy()
    };
    assert!(with(json!([]), ""));
    let lingering = json!([{"npu_name": "Ascend910-1", "fault_code": "80E18401",
        "fault_time_and_level_map": {"80E18401": {"fault_time": 1, "fault_level": "NotHandleFault"}}},
        {"npu_name": "Ascend910-2", "fault_code": "", "fault_handling": "RestartBusiness"}]);
    assert!(with(lingering, ""));
    let pre = json!([{"npu_name": "Ascend910-0", "fault_code": "81078603", "fault_handling": "PreSeparateNPU"}]);
    assert!(!with(pre, ""));
    let unknown = json!([{"npu_name": "Ascend910-0", "fault_code": "81078603"}]);
    assert!(!with(unknown, ""));
    assert!(!with(json!([]), "Ascend910-4"));
    let c = cm("kube-system", &cfg(json!({})), Some("Ascend910-0"));
    assert!(!parse_deviceinfo(&c).unwrap().healthy());
}

#[test]
fn chip_indices() {
    assert_eq!(chip_index("Ascend910-3"), Some("3"));
    assert_eq!(chip_index("Ascend910-2c-100-3"), Some("3"));
    assert_eq!(chip_index("weird"), Some("weird"));
    assert_eq!(chip_index(""), None);
}

#[test]
fn levels_map_to_rebound_levels() {
    let c = CodeFault {
        code: "80E18402".into(),
        level: Some("SeparateNPU".into()),
        time: None,
    };
    assert_eq!(c.level(), Some(Level::Separate));
}
