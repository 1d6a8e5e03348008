//! Device scope (DESIGN.md §4): a fault on one device concerns the pods
//! that hold that device, and with the root policy's
//! `nodeActions.isolation: Device` takes that device alone out of
//! scheduling (rebound's DRA DeviceTaintRule) instead of its node.
//!
//! Where it applies: the fault names a device (`device` on its line), its
//! node publishes that device in a ResourceSlice, and every slice and claim
//! has been listed ([`super::store::dra::DraIndex::resolve`]). Then:
//! - at job levels (RestartJob and below) only the jobs whose pods' claims
//!   hold the device are restarted, whatever the isolation;
//! - at ResetDevice and Separate with `isolation: Device`, the jobs on the
//!   device are restarted and the device is isolated (NoSchedule; NoExecute
//!   at Separate), counted by the breaker as a separation of its node; a
//!   node that would lose more than `maxIsolatedDevices` is cordoned
//!   instead. Device faults from Events (no clear signal) cordon the node as
//!   before.
//!
//! Anywhere else (no DRA, the device not published, `isolation: Node`) the
//! node is the scope, as before.

use super::effect::{EffectKind, describe};
use super::nodes::InFlight;
use super::store::dra::{DeviceRef, Listed, rule_name};
use super::validation::{Subject, Verdict};
use super::{Core, Now, Waiting};
use crate::api::Isolation;
use crate::fault::{Classified, Fault, Level};
use crate::recover::{Notice, reasons};
use crate::workload::JobRef;
use std::collections::BTreeMap;

/// What a device fault concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum DeviceScope {
    /// That device alone (and the jobs holding it).
    Device(DeviceRef),
    /// The jobs of these pods (`namespace/name`), which its trusted
    /// reporter saw holding the device (the node agent, from the kubelet's
    /// PodResources API, where DRA cannot tell): job levels only.
    Pods(Box<[String]>),
    /// Its node (and every job on it).
    Node,
    /// Not known yet: decided once the DRA lists are in.
    Wait,
}

impl Core {
    /// What a fault of `level` concerns: one device, where device scope
    /// applies to it (see the module's doc); its node; or not known yet
    /// (the DRA lists it needs are still coming, at most
    /// [`super::store::dra::LIST_BOUND`] after start).
    pub(super) fn device_scope(&self, f: &Fault, level: Level, now: Now) -> DeviceScope {
        let (Some(node), Some(device)) = (f.node.as_deref(), f.device.as_deref()) else {
            return DeviceScope::Node;
        };
        let rules = level.cordons_node();
        if rules {
            let (cfg, _) = self.engine.policies.node_config(&self.engine.node_default);
            if cfg.isolation != Isolation::Device {
                return DeviceScope::Node;
            }
        }
        // What the node itself reported holding the device, if trusted and
        // not empty (an empty list may be a lookup that missed: the node).
        let reported = || {
            f.holders
                .clone()
                .filter(|h| f.trusted && !rules && !h.is_empty())
                .map(DeviceScope::Pods)
        };
        match self.store.dra.listed(rules, now.wall) {
            Listed::Never => reported().unwrap_or(DeviceScope::Node),
            Listed::NotYet => reported().unwrap_or(DeviceScope::Wait),
            Listed::Yes => match self.store.dra.resolve(node, device) {
                Some(d) => DeviceScope::Device(d),
                None => reported().unwrap_or(DeviceScope::Node),
            },
        }
    }

    /// The jobs of the live pods `pods` (`namespace/name`) on `node` that
    /// existed at `since`.
    pub(super) fn jobs_of_pods(
        &self,
        node: Option<&str>,
        pods: &[String],
        since: Option<i64>,
    ) -> Vec<JobRef> {
        let mut out: BTreeMap<(String, String, String), JobRef> = BTreeMap::new();
        for (ns, name) in pods.iter().filter_map(|p| p.split_once('/')) {
            let Some(p) = self.store.pod(ns, name) else {
                continue;
            };
            // A pod the line names on another node is not this fault's.
            if p.deleting || p.node.as_deref() != node || since.is_some_and(|t| p.created > t) {
                continue;
            }
            out.entry(super::store::job_key(&p.job))
                .or_insert_with(|| (*p.job).clone());
        }
        out.into_values().collect()
    }

    /// Why a fault on one device cordons its node although the root policy
    /// asks for `isolation: Device` (said in the cordon's Event), if so.
    pub(super) fn device_fallback(
        &self,
        f: &Fault,
        sticky: bool,
        cfg: &crate::policy::NodeConfig,
        now: Now,
    ) -> Option<String> {
        if cfg.isolation != Isolation::Device {
            return None;
        }
        let device = f.device.as_deref()?;
        let node = f.node.as_deref()?;
        let why = if sticky {
            "the fault came in an Event, which sends no clear signal".to_string()
        } else {
            match self.store.dra.served {
                Some((false, _)) | None => {
                    "the API server serves no ResourceSlices and ResourceClaims (no DRA)".into()
                }
                Some((true, false)) => "the API server serves no DeviceTaintRules (Kubernetes 1.36 needs resource.k8s.io/v1beta2 and the DRADeviceTaintRules gate)".into(),
                Some((true, true)) => match self.store.dra.listed(true, now.wall) {
                    Listed::Yes => match self.store.dra.resolve(node, device) {
                        None => format!("no ResourceSlice of the node publishes device {device}"),
                        Some(_) => format!(
                            "more than maxIsolatedDevices ({}) of its devices are faulty",
                            cfg.max_isolated_devices
                        ),
                    },
                    _ => "the DRA objects could not be listed".into(),
                },
            }
        };
        Some(format!("isolation: Device fell back to the node: {why}"))
    }

    /// The DRA lists were given up on (served, not listed within their
    /// bound): what waited for them is decided with the node as scope.
    pub(super) fn dra_tick(&mut self, now: Now) {
        self.store.dra.asked_at.get_or_insert(now.wall);
        let dra = &self.store.dra;
        let given_up = dra.listed(false, now.wall) == Listed::Never
            || dra.listed(true, now.wall) == Listed::Never;
        if given_up && !self.nodes.dra_given_up {
            self.nodes.dra_given_up = true;
            let (claims, rules) = dra.served.unwrap_or((true, true));
            if claims && !(dra.ready() && (!rules || dra.rules_synced)) {
                tracing::warn!(
                    "the ResourceSlices, ResourceClaims or DeviceTaintRules could not be listed in time: device faults keep their node as scope until they are"
                );
            }
            self.dirty_nodes.extend(self.store.nodes.keys().cloned());
            self.decide_waiting(now);
        }
    }

    /// The jobs with a live pod holding `device` that existed at `since`
    /// (seconds; `None`: any).
    pub(super) fn jobs_on_device(&self, device: &DeviceRef, since: Option<i64>) -> Vec<JobRef> {
        let mut out: BTreeMap<(String, String, String), JobRef> = BTreeMap::new();
        for (ns, pod) in self.store.dra.holders(device) {
            let Some(p) = self.store.pod(&ns, &pod) else {
                continue;
            };
            if p.deleting || since.is_some_and(|t| p.created > t) {
                continue;
            }
            out.entry(super::store::job_key(&p.job))
                .or_insert_with(|| (*p.job).clone());
        }
        out.into_values().collect()
    }

    /// Bring the node's device isolations to what its faults want, and
    /// return the faults left for the node itself (those not isolated by
    /// device). At most one device action per node at a time.
    pub(super) fn reconcile_devices(
        &mut self,
        name: &str,
        faults: Vec<(Classified, bool)>,
        cfg: &crate::policy::NodeConfig,
        now: Now,
    ) -> Vec<(Classified, bool)> {
        let mut wanted: BTreeMap<DeviceRef, Classified> = BTreeMap::new();
        // Devices a trusted fault at a cordoning level names now, isolated
        // or not: their rules stay until those faults clear.
        let named: std::collections::BTreeSet<DeviceRef> = faults
            .iter()
            .filter(|(c, _)| c.fault.trusted && c.level.cordons_node())
            .filter_map(|(c, _)| {
                let node = c.fault.node.as_deref()?;
                self.store.dra.resolve(node, c.fault.device.as_deref()?)
            })
            .collect();
        // Each fault with the device it isolates (`None`: the node's).
        let mut scoped: Vec<(Classified, bool, Option<DeviceRef>)> = Vec::new();
        let mut waiting = false;
        for (c, sticky) in faults {
            let scope = if c.fault.trusted && c.level.cordons_node() && !sticky {
                self.device_scope(&c.fault, c.level, now)
            } else {
                DeviceScope::Node
            };
            match scope {
                DeviceScope::Device(d) => {
                    let better = wanted.get(&d).is_none_or(|w| c.level > w.level);
                    if better {
                        wanted.insert(d.clone(), c.clone());
                    }
                    scoped.push((c, sticky, Some(d)));
                }
                // Not known yet: neither the device nor the node is taken
                // out for it until the lists are in.
                DeviceScope::Wait => waiting = true,
                // (Reported holders scope job levels only, never these.)
                DeviceScope::Node | DeviceScope::Pods(_) => scoped.push((c, sticky, None)),
            }
        }
        let too_many = wanted.len() > cfg.max_isolated_devices as usize;
        if too_many {
            if self.nodes.note_too_many_devices(name) {
                tracing::warn!(node = %name, devices = wanted.len(), max = cfg.max_isolated_devices, "more faulty devices than maxIsolatedDevices: the node is cordoned instead");
            }
            wanted.clear();
        }
        // The faults isolated by device leave the node in service.
        let rest: Vec<(Classified, bool)> = scoped
            .into_iter()
            .filter(|(_, _, d)| too_many || d.is_none())
            .map(|(c, sticky, _)| (c, sticky))
            .collect();
        if waiting {
            return rest;
        }
        if wanted.is_empty() {
            self.nodes.isolating.remove(name);
            self.nodes.device_held.remove(name);
        } else {
            self.nodes
                .isolating
                .insert(name.to_string(), wanted.keys().cloned().collect());
        }
        if !self.store.dra.rules_synced {
            return rest;
        }
        if self.waits_for_nodes(now) {
            // The breaker is read afresh first (fresh.rs).
            return rest;
        }
        let existing = self.store.dra.rules_on(name);
        let dry = self.engine.global_dry_run || self.engine.policies.node_dry_run();
        for (dev, c) in &wanted {
            if existing.contains_key(dev) {
                continue;
            }
            if dry {
                if self.nodes.note_dry_device(name, dev) {
                    self.metrics.decision("isolate_device", "dry_run");
                    let note = format!(
                        "dry run: would isolate device {dev} after {}",
                        describe(&c.fault)
                    );
                    self.node_event(
                        name,
                        Notice::normal(reasons::RESTART_SKIPPED, "IsolateDevice", note),
                    );
                }
                continue;
            }
            // The breaker bounds the nodes that lose capacity in its
            // window: a node's first isolated device counts as a
            // separation of it.
            if !self.breaker_allows(name, now) {
                self.metrics.decision("isolate_device", "BreakerOpen");
                self.nodes.device_held.insert(name.to_string());
                self.hold_for_breaker(name, c.level, now);
                return rest;
            }
            self.nodes.device_held.remove(name);
            self.nodes.release_hold(name);
            let no_execute = c.level >= Level::Separate;
            let rule = rule_name(dev);
            let note = format!(
                "Device {dev} isolated at level {} (DeviceTaintRule {rule}, {}) after {}; the node stays in service",
                c.level,
                if no_execute {
                    "NoExecute"
                } else {
                    "NoSchedule"
                },
                describe(&c.fault)
            );
            self.metrics.decision("isolate_device", "acted");
            self.effect_for(
                Waiting::Node(name.to_string()),
                EffectKind::IsolateDevice {
                    node: name.to_string(),
                    rule: rule.clone(),
                    device: dev.clone(),
                    value: c.fault.code.clone(),
                    no_execute,
                },
                None,
            );
            self.nodes.sent_now(name, now);
            self.nodes.start(
                name,
                InFlight::Isolate {
                    device: dev.clone(),
                    rule,
                    value: c.fault.code.clone(),
                    note,
                },
            );
            return rest;
        }
        if cfg.auto_uncordon && !dry {
            for (dev, r) in existing {
                if named.contains(&dev) {
                    continue;
                }
                // Back to service only once its validation passed.
                if let Some(v) = &cfg.validation {
                    let env = self.store.dra.device_env(&dev);
                    // The rule's uid comes with its watch event: until then, wait.
                    let Some(subject) = Subject::device(name, &dev, &r, env) else {
                        continue;
                    };
                    if self.validated(&subject, v, now) == Verdict::Keep {
                        continue;
                    }
                }
                self.metrics.decision("return_device", "acted");
                self.effect_for(
                    Waiting::Node(name.to_string()),
                    EffectKind::LiftDevice {
                        node: name.to_string(),
                        rule: r.name.clone(),
                    },
                    None,
                );
                self.nodes.start(
                    name,
                    InFlight::Lift {
                        device: dev,
                        rule: r.name,
                        validated: cfg.validation.is_some(),
                    },
                );
                return rest;
            }
        }
        rest
    }

    /// Whether the pod holds a device its node's faults isolate: it must
    /// move, as a pod on a cordoned node must.
    pub(super) fn on_isolated_device(&self, p: &super::pods::PodInfo) -> bool {
        let Some(devs) = p.node.as_deref().and_then(|n| self.nodes.isolating.get(n)) else {
            return false;
        };
        devs.iter().any(|d| {
            self.store
                .dra
                .holders(d)
                .iter()
                .any(|(ns, name)| **ns == *p.namespace && **name == *p.name)
        })
    }

    /// A device action finished well: the store shows it at once (the
    /// rules' watch confirms it), and the node's Event says what was done.
    pub(super) fn device_done(&mut self, name: &str, what: InFlight, now: Now) {
        match what {
            InFlight::Isolate {
                device,
                rule,
                value,
                note,
            } => {
                self.store
                    .dra
                    .made_rule(&rule, name, &device, &value, now.wall);
                self.node_event(
                    name,
                    Notice::warning(reasons::DEVICE_ISOLATED, "IsolateDevice", note),
                );
            }
            InFlight::Lift {
                device,
                rule,
                validated,
            } => {
                self.store.dra.removed_rule(&rule);
                let note = format!(
                    "Fault cleared{}: device {device} returned to scheduling (DeviceTaintRule {rule} deleted)",
                    if validated {
                        " and its validation passed"
                    } else {
                        ""
                    }
                );
                self.node_event(
                    name,
                    Notice::normal(reasons::DEVICE_RETURNED, "ReturnDevice", note),
                );
            }
            _ => {}
        }
    }
}
