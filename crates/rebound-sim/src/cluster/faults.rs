//! Fault injection on a running cluster: failed containers, node
//! conditions and cordons, Ascend NPU faults.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::actors::ascend::{AscendFault, AscendPlugin};

use super::{ClusterError, SimCluster};

impl SimCluster {
    /// Terminates a container (see [`Kubelet::fail_container`](crate::actors::kubelet::Kubelet::fail_container)).
    pub async fn fail_container(
        &self,
        ns: &str,
        pod: &str,
        container: &str,
        exit_code: i32,
        reason: &str,
    ) -> Result<(), ClusterError> {
        Ok(self
            .kubelet
            .fail_container(ns, pod, container, exit_code, reason)
            .await?)
    }

    /// Sets a node condition (see [`Kubelet::set_node_condition`](crate::actors::kubelet::Kubelet::set_node_condition)).
    pub async fn set_node_condition(
        &self,
        node: &str,
        ctype: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), ClusterError> {
        Ok(self
            .kubelet
            .set_node_condition(node, ctype, status, reason, message)
            .await?)
    }

    /// Makes a node Ready or NotReady.
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), ClusterError> {
        Ok(self.kubelet.set_node_ready(node, ready).await?)
    }

    /// Cordons or uncordons a node (`spec.unschedulable`), as `kubectl cordon` does.
    pub async fn set_node_unschedulable(
        &self,
        node: &str,
        unschedulable: bool,
    ) -> Result<(), ClusterError> {
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"unschedulable": if unschedulable { json!(true) } else { Value::Null }}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Reports NPU `chip` of `node` faulty with these hex fault codes, at
    /// level `SeparateNPU`, in the node's device-info ConfigMap.
    pub async fn set_ascend_fault(
        &self,
        node: &str,
        chip: u32,
        codes: &[&str],
    ) -> Result<(), ClusterError> {
        self.set_ascend_fault_with(
            node,
            AscendFault {
                chip,
                codes: codes.iter().map(|c| (*c).to_owned()).collect(),
                level: "SeparateNPU".into(),
                fault_type: "CardUnhealthy".into(),
            },
        )
        .await
    }

    /// Reports an NPU fault with a chosen level and type.
    pub async fn set_ascend_fault_with(
        &self,
        node: &str,
        fault: AscendFault,
    ) -> Result<(), ClusterError> {
        let plugin = self.ascend_plugin()?;
        Ok(plugin.set_fault(node, fault).await?)
    }

    /// Clears the NPU faults of `chip` (`None`: all chips) of `node`.
    pub async fn clear_ascend_fault(
        &self,
        node: &str,
        chip: Option<u32>,
    ) -> Result<(), ClusterError> {
        let plugin = self.ascend_plugin()?;
        Ok(plugin.clear_fault(node, chip).await?)
    }

    fn ascend_plugin(&self) -> Result<&AscendPlugin, ClusterError> {
        self.ascend.as_ref().ok_or_else(|| {
            ClusterError::Unsupported("the cluster was started with GPU nodes, not Ascend".into())
        })
    }
}

/// A kcover fault Event (`kcover.io/need-recovery: "true"`) in `ns` about
/// pod `pod` of that namespace, with `node` as its source host, `count`
/// and `message`: what any tenant can write in its own namespace (a real
/// API server accepts an Event about a Node only in `default` and
/// `kube-system`). Named by the server (`generateName: flood-`).
pub fn kcover_event(
    ns: &str,
    pod: &str,
    node: &str,
    count: i32,
    message: &str,
) -> k8s_openapi::api::core::v1::Event {
    use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        rebound::controller::time::to_jiff(chrono::Utc::now()),
    );
    Event {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("flood-".into()),
            namespace: Some(ns.into()),
            annotations: Some([("kcover.io/need-recovery".to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Pod".into()),
            name: Some(pod.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        source: Some(EventSource {
            host: Some(node.into()),
            ..Default::default()
        }),
        reason: Some("NeedRecovery".into()),
        message: Some(message.into()),
        count: Some(count),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        type_: Some("Warning".into()),
        ..Default::default()
    }
}
