//! The Ascend device plugin's `mindx-dl-deviceinfo-<node>` ConfigMaps as
//! fault carriers (the ClusterD input), one carrier per node.

use super::super::input::Change;
use super::super::store::Watched;
use super::super::{Core, Now, Scope};
use super::node_occurrences;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

impl Core {
    pub(in crate::controller::core) fn on_device_info(
        &mut self,
        c: Change<Box<ConfigMap>>,
        now: Now,
    ) {
        match c {
            Change::Apply(cm) => {
                let Some(node) = crate::fault::ascend::deviceinfo_node(&cm) else {
                    return;
                };
                let key = format!("device/{node}");
                self.store.relists.saw(Watched::DeviceInfo, &key);
                match crate::fault::ascend::deviceinfo_faults(&cm, now.wall) {
                    Ok(mut faults) => {
                        // A fault listed again is the same occurrence: keep
                        // the time it was first listed when the plugin
                        // wrote none of its own.
                        if let Some((prev, _)) = self.store.device_faults.get(&node) {
                            for f in &mut faults {
                                if let Some(p) = prev.iter().find(|p| {
                                    p.code == f.code && p.device == f.device && p.source == f.source
                                }) {
                                    f.first_seen = p.first_seen;
                                    f.last_seen = p.last_seen;
                                }
                            }
                        }
                        let parsed = crate::fault::ascend::parse_deviceinfo(&cm).ok();
                        let healthy =
                            faults.is_empty() || parsed.as_ref().is_some_and(|d| d.healthy());
                        if let Some(v) = &self.clusterd {
                            v.set_device_info(&node, parsed);
                        }
                        let occs = node_occurrences(&faults, Scope::Node, now);
                        self.store
                            .device_faults
                            .insert(node.clone(), (faults, healthy));
                        self.set_carrier(key, occs, now);
                        self.dirty_nodes.insert(node);
                    }
                    Err(e) => {
                        tracing::warn!(configmap = %cm.name_any(), error = %e, "unreadable device-plugin ConfigMap");
                        self.metrics
                            .parse_errors
                            .get_or_create(&crate::metrics::KindLabels {
                                kind: "ConfigMap".into(),
                            })
                            .inc();
                    }
                }
            }
            Change::Delete(cm) => {
                if let Some(node) = crate::fault::ascend::deviceinfo_node(&cm) {
                    self.device_removed(&node, now);
                }
            }
            Change::Relist => self.store.relists.begin(Watched::DeviceInfo),
            Change::Synced => {
                if let Some(seen) = self.end_relist(Watched::DeviceInfo) {
                    let gone: Vec<String> = self
                        .store
                        .device_faults
                        .keys()
                        .filter(|n| !seen.contains(&format!("device/{n}")))
                        .cloned()
                        .collect();
                    for n in gone {
                        self.device_removed(&n, now);
                    }
                }
            }
        }
    }

    fn device_removed(&mut self, node: &str, now: Now) {
        self.store.device_faults.remove(node);
        if let Some(v) = &self.clusterd {
            v.set_device_info(node, None);
        }
        self.set_carrier(format!("device/{node}"), Vec::new(), now);
        self.dirty_nodes.insert(node.to_string());
    }
}
