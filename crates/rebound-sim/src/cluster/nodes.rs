//! The simulated nodes: their names and the Node objects registered for
//! them.

use serde_json::{Value, json};

use super::{Accelerator, SimConfig};

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("node-{i:04}")
}

pub(super) fn node_object(i: usize, cfg: &SimConfig) -> Value {
    let name = format!("{}{i:04}", cfg.node_prefix);
    let kubelet = cfg.shared.as_ref().and_then(|s| s.kubelet);
    let ip = match kubelet {
        Some(k) => k.ip_of(i).to_string(),
        None => format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256),
    };
    let res = cfg.accelerator.resource();
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": if cfg.accelerator == Accelerator::Ascend { "arm64" } else { "amd64" },
        "node.kubernetes.io/instance-type": "sim.accelerated",
        "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
    });
    match cfg.accelerator {
        Accelerator::Gpu => {
            labels["nvidia.com/gpu.present"] = json!("true");
            labels["nvidia.com/gpu.product"] = json!("NVIDIA-H100-80GB-HBM3");
            labels["nvidia.com/gpu.count"] = json!(cfg.gpus_per_node.to_string());
        }
        Accelerator::Ascend => {
            labels["accelerator"] = json!("huawei-Ascend910");
            labels["host-arch"] = json!("huawei-arm");
        }
    }
    let capacity = json!({
        "cpu": "192", "memory": "2113877504Ki", "pods": "110", "ephemeral-storage": "3750000000Ki",
        res: cfg.gpus_per_node.to_string(),
    });
    let now = crate::actors::util::now_rfc3339();
    let cond = |t: &str, s: &str, r: &str, m: &str| {
        json!({"type": t, "status": s, "reason": r, "message": m,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let spec = match &cfg.shared {
        None => json!({"podCIDR": format!("10.244.{}.0/24", i % 256)}),
        // On a real cluster the node IPAM controller hands out pod CIDRs; a
        // made-up one could collide with a real node's.
        Some(sh) => {
            json!({"taints": [{"key": sh.taint_key, "value": "true", "effect": "NoSchedule"}]})
        }
    };
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            // What a v1.36 kubelet declares for the restart rules the
            // simulated one runs: kube-scheduler's NodeDeclaredFeatures
            // filter places a pod with a `RestartAllContainers` rule only on
            // a node that declares it (`rebound sim --real-scheduler`).
            "declaredFeatures": ["RestartAllContainersOnContainerExits"],
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "5.15.0-sim", "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.33.0",
                "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": if cfg.accelerator == Accelerator::Ascend { "arm64" } else { "amd64" },
            },
        },
    });
    if let Some(k) = kubelet {
        node["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": k.port}});
    }
    node
}

/// The name of node `i` of a cluster shaped by `cfg`.
pub(super) fn nth_node(cfg: &SimConfig, i: usize) -> String {
    format!("{}{i:04}", cfg.node_prefix)
}
