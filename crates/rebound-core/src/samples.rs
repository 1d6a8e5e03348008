//! The shipped samples, embedded so that `rebound demo` and `rebound sim`
//! work from the binary alone.

/// `(path under samples/, YAML)` of every shipped sample.
pub const SAMPLES: &[(&str, &str)] = &[
    (
        "classifications/nvidia-xid.yaml",
        include_str!("../../../samples/classifications/nvidia-xid.yaml"),
    ),
    (
        "classifications/ascend-npu.yaml",
        include_str!("../../../samples/classifications/ascend-npu.yaml"),
    ),
    (
        "classifications/pod-exit.yaml",
        include_str!("../../../samples/classifications/pod-exit.yaml"),
    ),
    (
        "classifications/node-condition.yaml",
        include_str!("../../../samples/classifications/node-condition.yaml"),
    ),
    (
        "classifications/aks-node-problem-detector.yaml",
        include_str!("../../../samples/classifications/aks-node-problem-detector.yaml"),
    ),
    (
        "classifications/nvsentinel.yaml",
        include_str!("../../../samples/classifications/nvsentinel.yaml"),
    ),
    (
        "classifications/gpu-health.yaml",
        include_str!("../../../samples/classifications/gpu-health.yaml"),
    ),
    (
        "classifications/kube-event.yaml",
        include_str!("../../../samples/classifications/kube-event.yaml"),
    ),
    (
        "policies/cluster-default.yaml",
        include_str!("../../../samples/policies/cluster-default.yaml"),
    ),
    (
        "policies/team-policy.yaml",
        include_str!("../../../samples/policies/team-policy.yaml"),
    ),
    (
        "policies/dry-run.yaml",
        include_str!("../../../samples/policies/dry-run.yaml"),
    ),
];
