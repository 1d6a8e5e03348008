//! What rebound wants of each node, recomputed from what it observes:
//! cordoned (and tainted at Separate) while a trusted fault at a cordoning
//! level is present, uncordoned once it clears (only nodes rebound
//! cordoned, never one cordoned for an Event-borne fault, which sends no
//! clear signal). The circuit breaker counts separations within its window
//! from the nodes' `rebound.dev/separated-at` annotations, so its state is
//! in the cluster; a separation it holds back stays wanted and happens when
//! the window allows.

use super::effect::{EffectKind, Outcome, describe};
use super::store::{CORDON_STICKY_ANNOTATION, SEPARATED_AT_ANNOTATION};
use super::{Core, LANDING_BOUND, Now, Waiting};
use crate::controller::core::hashing::{HashMap, HashSet};
use crate::fault::{Classified, Level};
use crate::policy::{Breaker, NodeAction, NodeInput, Skip, decide_node};
use crate::recover::{Notice, reasons};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// A node action in flight, with what its Event will say.
#[derive(Clone, Debug)]
pub(super) enum InFlight {
    Cordon {
        level: Level,
        taint: Option<String>,
        note: String,
    },
    Uncordon {
        taint_key: String,
    },
    /// One device's DeviceTaintRule being made (devices.rs).
    Isolate {
        device: super::store::dra::DeviceRef,
        rule: String,
        /// The taint's value (the fault's code).
        value: String,
        note: String,
    },
    /// One device's DeviceTaintRule being deleted.
    Lift {
        device: super::store::dra::DeviceRef,
        rule: String,
        /// After a validation passed.
        validated: bool,
    },
}

/// The core's bookkeeping of node actions.
#[derive(Debug, Default)]
pub struct NodeBook {
    inflight: HashMap<String, InFlight>,
    /// Separations the breaker holds back (node → level wanted).
    held: BTreeMap<String, Level>,
    /// Nodes whose hold was announced (one BreakerOpen Event an episode).
    announced: HashSet<String>,
    /// Nodes whose cordon the breaker held back in their current fault
    /// episode (kept once the cordon is made): pods may have been put
    /// there after the fault, and must move too.
    held_in_episode: HashSet<String>,
    /// Nodes whose dry-run decision was announced, at that level.
    noted: HashMap<String, Level>,
    /// Each node's current fault level (its highest trusted fault).
    levels: HashMap<String, Level>,
    /// When a failed node action may be tried again.
    retry_at: HashMap<String, (DateTime<Utc>, u32)>,
    /// When a cordon of each node was last sent, whatever became of it:
    /// until the cluster shows when it landed (an answer, or the node's
    /// `separated-at` annotation as new as the request), the breaker
    /// counts it at the latest moment it may land ([`LANDING_BOUND`] after
    /// it left): an answer lost, a request applied late, a watch behind,
    /// must not let one more through.
    sent: HashMap<String, DateTime<Utc>>,
    /// Nodes whose faulty devices outnumber `maxIsolatedDevices` (logged
    /// once), and devices whose dry-run isolation was announced.
    too_many_devices: HashSet<String>,
    /// The devices of each node its faults isolate (made or not yet).
    pub(super) isolating: HashMap<String, std::collections::BTreeSet<super::store::dra::DeviceRef>>,
    noted_devices: HashSet<(String, super::store::dra::DeviceRef)>,
    /// The DRA lists were given up on (logged once).
    pub(super) dra_given_up: bool,
    /// Nodes whose device isolation the breaker holds back.
    pub(super) device_held: HashSet<String>,
    /// Nodes whose last separation request (cordon, device isolation)
    /// failed and is to be tried again.
    separation_failed: HashSet<String>,
}

impl NodeBook {
    /// The node's current fault level, if it has faults.
    pub fn level(&self, node: &str) -> Option<Level> {
        self.levels.get(node).copied()
    }

    /// At least `level` for `node` until its next reconcile recomputes it
    /// from all its faults.
    pub fn raise_level(&mut self, node: &str, level: Level) {
        let l = self.levels.entry(node.to_string()).or_insert(level);
        *l = (*l).max(level);
    }

    /// Whether a separation of `node` (its cordon, or a device's
    /// isolation) is under way: sent and not answered, or failed and to be
    /// tried again. Restarts wait for it (plan.rs).
    pub fn separation_pending(&self, node: &str) -> bool {
        match self.inflight.get(node) {
            Some(InFlight::Cordon { .. } | InFlight::Isolate { .. }) => true,
            Some(_) => false,
            None => self.separation_failed.contains(node),
        }
    }

    /// Whether the breaker holds a separation of `node` back.
    pub fn is_held(&self, node: &str) -> bool {
        self.held.contains_key(node)
    }

    /// Whether the breaker held a cordon of `node` back in its current
    /// fault episode.
    pub fn was_held(&self, node: &str) -> bool {
        self.held_in_episode.contains(node)
    }

    /// Separations held back.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// A leadership term ended: node actions in flight are no longer
    /// followed (their outcomes are ignored); the next term reconciles
    /// every node from what the cluster shows. What was sent stays counted
    /// by the breaker.
    pub fn end_term(&mut self) {
        self.inflight.clear();
        self.retry_at.clear();
    }

    /// Whether this is the first time `node` has more faulty devices than
    /// it may isolate (logged once while the node is known).
    pub fn note_too_many_devices(&mut self, node: &str) -> bool {
        self.too_many_devices.insert(node.to_string())
    }

    /// Whether the dry-run isolation of `dev` is announced for the first time.
    pub fn note_dry_device(&mut self, node: &str, dev: &super::store::dra::DeviceRef) -> bool {
        self.noted_devices.insert((node.to_string(), dev.clone()))
    }

    /// The breaker lets the node's separation through now.
    pub fn release_hold(&mut self, node: &str) {
        self.held.remove(node);
        self.announced.remove(node);
    }

    /// A separation of `node` was sent now (its landing unknown yet).
    pub fn sent_now(&mut self, node: &str, now: Now) {
        self.sent.insert(node.to_string(), now.wall);
    }

    /// A node action is under way.
    pub(super) fn start(&mut self, node: &str, what: InFlight) {
        self.inflight.insert(node.to_string(), what);
    }

    /// Forget a node that is gone.
    pub fn forget(&mut self, node: &str) {
        self.too_many_devices.remove(node);
        self.isolating.remove(node);
        self.device_held.remove(node);
        self.separation_failed.remove(node);
        self.noted_devices.retain(|(n, _)| n != node);
        self.inflight.remove(node);
        self.held.remove(node);
        self.announced.remove(node);
        self.held_in_episode.remove(node);
        self.noted.remove(node);
        self.levels.remove(node);
        self.retry_at.remove(node);
        self.sent.remove(node);
    }
}

impl Core {
    /// The breaker as the cluster shows it for a separation of `node`:
    /// every other node's last separation (its annotation, or a cordon
    /// request sent since whose landing is not confirmed, counted at the
    /// latest it may land); those within the window count. The breaker
    /// bounds the nodes separated in a window, so the node's own earlier
    /// separation is not counted against it (a new one replaces it): a
    /// new leader whose watch does not show its cordon yet may make it
    /// again.
    fn breaker(&self, node: &str) -> Breaker {
        let (cfg, _) = self.engine.policies.node_config(&self.engine.node_default);
        let mut b = Breaker::new(
            cfg.max_separated,
            cfg.breaker_window,
            self.store.nodes.len() as u32,
        );
        let mut last: HashMap<String, DateTime<Utc>> = self
            .store
            .nodes
            .values()
            .filter_map(|n| n.separated_at.map(|t| (n.name.clone(), t)))
            .collect();
        let mut keep = |n: &str, t: DateTime<Utc>| {
            let e = last.entry(n.to_string()).or_insert(t);
            *e = (*e).max(t);
        };
        // Nodes that lost a device to an isolation of rebound's count
        // from when their newest rule was made.
        let isolated = self.store.dra.isolated_nodes();
        for (n, t) in &isolated {
            if let Some(t) = t {
                keep(n, *t);
            }
        }
        // What the take-over's read of the nodes showed (a watch behind
        // the old leader's cordons must not hide them).
        for (n, t) in &self.fresh.separated {
            keep(n, *t);
        }
        let landing = chrono::Duration::from_std(LANDING_BOUND).unwrap_or_default();
        for (n, t) in &self.nodes.sent {
            let shown = [
                self.store.nodes.get(n).and_then(|x| x.separated_at),
                isolated.get(n).copied().flatten(),
            ];
            // Shown at the precision the cluster keeps (the annotation to
            // the millisecond, a rule's creation to the second): a second's
            // slack, so that a cordon that landed in the same instant as
            // it was sent is not counted again at its landing bound.
            let slack = chrono::Duration::seconds(1);
            if shown.into_iter().flatten().any(|s| s + slack >= *t) {
                continue;
            }
            keep(n, t.checked_add_signed(landing).unwrap_or(*t));
        }
        last.remove(node);
        let mut times: Vec<DateTime<Utc>> = last.into_values().collect();
        times.sort();
        for t in times {
            b.record(t);
        }
        b
    }

    /// The trusted fault of the highest level a node carries now, and
    /// whether it came from an Event (no clear signal).
    /// Every trusted fault the node carries now, classified, and whether
    /// it came from an Event (no clear signal).
    fn node_faults_classified(&mut self, name: &str, now: Now) -> Vec<(Classified, bool)> {
        let view = self.node_view(Some(name));
        // Every occurrence the node's carriers hold (a repeated fault's
        // later occurrences escalate it), and its Events' (sticky).
        let mut keys: Vec<(String, bool)> = vec![
            (format!("node/{name}"), false),
            (format!("device/{name}"), false),
        ];
        // Only trusted Events reach a node's state (an index, not a scan
        // of every Event: a tenant's flood costs node reconcile nothing).
        keys.extend(
            self.store
                .trusted_node_events(name)
                .map(|k| (k.to_string(), true)),
        );
        let faults: Vec<(crate::fault::Fault, bool)> = keys
            .iter()
            .flat_map(|(k, sticky)| {
                self.carriers
                    .get(k)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| self.current.get(id))
                    .filter(|o| o.fault.trusted)
                    .map(move |o| (o.fault.clone(), *sticky))
            })
            .collect();
        faults
            .into_iter()
            .map(|(f, sticky)| {
                let c = self
                    .engine
                    .classifier
                    .reclassify(f, view.as_ref(), now.wall);
                (c, sticky)
            })
            .collect()
    }

    /// Bring one node to what its faults want.
    pub(super) fn reconcile_node(&mut self, name: &str, now: Now) {
        let Some(node) = self.store.nodes.get(name).cloned() else {
            self.nodes.forget(name);
            return;
        };
        if self.nodes.inflight.contains_key(name)
            || self
                .nodes
                .retry_at
                .get(name)
                .is_some_and(|(t, _)| *t > now.wall)
        {
            return;
        }
        let (cfg, from) = self.engine.policies.node_config(&self.engine.node_default);
        let faults = self.node_faults_classified(name, now);
        // Faults isolated by device leave the node in service (devices.rs).
        let rest = self.reconcile_devices(name, faults, &cfg, now);
        let worst = worst_of(rest);
        let level = worst
            .as_ref()
            .filter(|(c, _)| c.fault.trusted)
            .map(|(c, _)| c.level);
        match level {
            Some(l) => {
                self.nodes.levels.insert(name.to_string(), l);
            }
            None => {
                self.nodes.levels.remove(name);
            }
        }
        if self.nodes.inflight.contains_key(name) {
            // A device action started: the node's own waits for it.
            return;
        }
        // A device isolation the breaker holds keeps the node's hold (its
        // jobs' restarts wait for it, plan.rs).
        let device_held = self.nodes.device_held.contains(name);
        let Some((c, sticky)) = worst.filter(|(c, _)| c.fault.trusted && c.level.cordons_node())
        else {
            if !device_held {
                self.nodes.held.remove(name);
                self.nodes.announced.remove(name);
                self.nodes.held_in_episode.remove(name);
            }
            self.nodes.noted.remove(name);
            self.maybe_uncordon(&node, &cfg, now);
            return;
        };
        if self.waits_for_nodes(now) {
            // The take-over's read of the nodes decides the breaker: a
            // cordon waits for it (fresh.rs), at most its bound.
            return;
        }
        let input = NodeInput {
            name: name.to_string(),
            unschedulable: node.snap.unschedulable,
            cordoned_by_rebound: node.cordoned_by,
            tainted: node.snap.taints.iter().any(|t| t.key == cfg.taint_key),
        };
        let dry = self.engine.global_dry_run || self.engine.policies.node_dry_run();
        let breaker = self.breaker(name);
        let d = decide_node(&c, &input, &cfg, from, &breaker, dry, now.wall);
        match &d.skip {
            None if d.acts() => {
                let taint = d.actions.iter().find_map(|a| match a {
                    NodeAction::Taint { key } => Some(key.clone()),
                    _ => None,
                });
                let mut reasons = d.reasons.clone();
                if let Some(why) = self.device_fallback(&c.fault, sticky, &cfg, now) {
                    reasons.push(why);
                }
                let note = format!(
                    "Cordoned{} at level {} after {}: {}",
                    if taint.is_some() { " and tainted" } else { "" },
                    c.level,
                    describe(&c.fault),
                    reasons.join("; ")
                );
                self.nodes.held.remove(name);
                self.nodes.announced.remove(name);
                self.metrics.decision("cordon", "acted");
                let received = self
                    .current
                    .values()
                    .filter(|o| o.fault.trusted && o.fault.node.as_deref() == Some(name))
                    .filter_map(|o| o.received)
                    .max();
                self.effect_for(
                    Waiting::Node(name.to_string()),
                    EffectKind::Cordon {
                        node: name.to_string(),
                        snapshot: node.snap.clone(),
                        level: c.level,
                        taint: taint.clone(),
                        reason: format!("{}/{}", c.fault.source, c.fault.code),
                        sticky,
                        held: self.nodes.was_held(name),
                    },
                    received,
                );
                if !node.snap.unschedulable {
                    self.nodes.sent.insert(name.to_string(), now.wall);
                }
                self.nodes.inflight.insert(
                    name.to_string(),
                    InFlight::Cordon {
                        level: c.level,
                        taint,
                        note,
                    },
                );
            }
            Some(Skip::BreakerOpen { .. }) => {
                self.metrics.decision("cordon", "BreakerOpen");
                self.hold_for_breaker(name, c.level, now);
            }
            Some(Skip::DryRun) => {
                if self.nodes.noted.get(name) != Some(&c.level) {
                    self.nodes.noted.insert(name.to_string(), c.level);
                    self.metrics.decision("cordon", "dry_run");
                    let note = format!("dry run: would cordon: {}", d.reasons.join("; "));
                    self.node_event(
                        name,
                        Notice::normal(reasons::RESTART_SKIPPED, "Cordon", note),
                    );
                }
            }
            _ if device_held => {}
            _ => {
                self.nodes.held.remove(name);
            }
        }
    }

    /// Whether the breaker lets a separation of `name` through now.
    pub(super) fn breaker_allows(&self, name: &str, now: Now) -> bool {
        self.breaker(name).allows(now.wall)
    }

    /// The breaker holds the separation of `name` back (announced once an
    /// episode): restarts for it wait (plan.rs `cordon_held_skip`).
    pub(super) fn hold_for_breaker(&mut self, name: &str, level: Level, now: Now) {
        self.nodes.held.insert(name.to_string(), level);
        self.nodes.held_in_episode.insert(name.to_string());
        if self.nodes.announced.insert(name.to_string()) {
            let b = self.breaker(name);
            let (used, allowed) = (b.used(now.wall), b.allowed());
            tracing::warn!(node = %name, used, allowed, "circuit breaker open: separation held back");
            let note = format!(
                "Circuit breaker open: {used} of {allowed} nodes already separated in the window; the separation of this node is held and made when the window allows"
            );
            self.node_event(name, Notice::warning(reasons::BREAKER_OPEN, "Cordon", note));
        }
    }

    fn maybe_uncordon(
        &mut self,
        node: &super::store::NodeInfo,
        cfg: &crate::policy::NodeConfig,
        now: Now,
    ) {
        if node.cordoned_by.is_none()
            || node.sticky
            || !cfg.auto_uncordon
            || self.engine.global_dry_run
            || self.store.node_has_faults(&node.name)
            || self
                .store
                .device_faults
                .get(&node.name)
                .is_some_and(|(_, healthy)| !healthy)
        {
            return;
        }
        // Back to service only once its validation passed (validation.rs).
        if let Some(v) = cfg.validation.as_ref().filter(|v| v.nodes) {
            let subject = super::validation::Subject::node(node);
            if self.validated(&subject, v, now) == super::validation::Verdict::Keep {
                return;
            }
        }
        self.metrics.decision("uncordon", "acted");
        self.effect_for(
            Waiting::Node(node.name.clone()),
            EffectKind::Uncordon {
                node: node.name.clone(),
                snapshot: node.snap.clone(),
                taint_key: cfg.taint_key.clone(),
            },
            None,
        );
        self.nodes.inflight.insert(
            node.name.clone(),
            InFlight::Uncordon {
                taint_key: cfg.taint_key.clone(),
            },
        );
    }

    /// A node action finished: on success the store shows its result at
    /// once (the watch confirms it soon), so the node is not acted on
    /// twice; a failure is retried with backoff.
    pub(super) fn node_done(&mut self, name: &str, _id: u64, outcome: Outcome, now: Now) {
        let Some(what) = self.nodes.inflight.remove(name) else {
            return;
        };
        let separation = matches!(what, InFlight::Cordon { .. } | InFlight::Isolate { .. });
        match &outcome {
            Outcome::Failed(_) if separation => {
                self.nodes.separation_failed.insert(name.to_string());
            }
            Outcome::Ok(_) | Outcome::Gone(_) => {
                self.nodes.separation_failed.remove(name);
            }
            _ => {}
        }
        match outcome {
            Outcome::Ok(_) if matches!(what, InFlight::Isolate { .. } | InFlight::Lift { .. }) => {
                self.nodes.retry_at.remove(name);
                self.device_done(name, what, now);
            }
            Outcome::Ok(_) => {
                self.nodes.retry_at.remove(name);
                let stamp = crate::fault::wire::format_at(now.wall);
                if let Some(n) = self.store.nodes.get_mut(name) {
                    match &what {
                        InFlight::Cordon { level, taint, .. } => {
                            n.snap.unschedulable = true;
                            n.cordoned_by = Some(n.cordoned_by.map_or(*level, |l| l.max(*level)));
                            n.separated_at = Some(now.wall);
                            n.snap
                                .annotations
                                .insert(SEPARATED_AT_ANNOTATION.to_string(), stamp);
                            if let Some(k) = taint {
                                n.snap.taints.push(k8s_openapi::api::core::v1::Taint {
                                    key: k.clone(),
                                    effect: "NoSchedule".into(),
                                    ..Default::default()
                                });
                            }
                        }
                        InFlight::Uncordon { taint_key } => {
                            n.cordoned_by = None;
                            n.snap.unschedulable = false;
                            n.sticky = false;
                            n.snap.annotations.remove(CORDON_STICKY_ANNOTATION);
                            n.snap.taints.retain(|t| &t.key != taint_key);
                        }
                        InFlight::Isolate { .. } | InFlight::Lift { .. } => {}
                    }
                }
                match what {
                    InFlight::Cordon { taint, note, .. } => {
                        let reason = if taint.is_some() {
                            reasons::NODE_TAINTED
                        } else {
                            reasons::NODE_CORDONED
                        };
                        self.node_event(name, Notice::warning(reason, "Cordon", note));
                    }
                    InFlight::Isolate { .. } | InFlight::Lift { .. } => {}
                    InFlight::Uncordon { .. } => self.node_event(
                        name,
                        Notice::normal(
                            reasons::NODE_UNCORDONED,
                            "Uncordon",
                            "Fault cleared: uncordoned (rebound had cordoned it)",
                        ),
                    ),
                }
                self.metrics.cordoned_nodes.set(
                    self.store
                        .nodes
                        .values()
                        .filter(|n| n.cordoned_by.is_some())
                        .count() as i64,
                );
            }
            Outcome::Gone(_) | Outcome::NotLeader => {}
            Outcome::Failed(why) => {
                let attempts = self.nodes.retry_at.get(name).map_or(0, |(_, a)| *a) + 1;
                let wait = chrono::Duration::seconds(1i64 << attempts.min(5));
                tracing::warn!(node = %name, attempts, %why, "node action failed; retrying");
                self.nodes.retry_at.insert(
                    name.to_string(),
                    (
                        now.wall.checked_add_signed(wait).unwrap_or(now.wall),
                        attempts,
                    ),
                );
            }
        }
        self.dirty_nodes.insert(name.to_string());
        // Restarts that waited for this separation go on now (or wait for
        // its retry).
        for id in self.ledger.due(now.wall) {
            self.decide_current(id, now);
        }
    }

    /// Write an Event about a node.
    pub(super) fn node_event(&mut self, node: &str, notice: Notice) {
        self.effect(
            EffectKind::Event {
                about: super::effect::About::Node(node.to_string()),
                notice,
            },
            None,
        );
    }
}

/// The trusted fault of the highest level among `faults`.
fn worst_of(faults: Vec<(Classified, bool)>) -> Option<(Classified, bool)> {
    let mut best: Option<(Classified, bool)> = None;
    for (c, sticky) in faults {
        let better = match &best {
            None => true,
            Some((b, _)) => (c.fault.trusted, c.level) > (b.fault.trusted, b.level),
        };
        if better {
            best = Some((c, sticky));
        }
    }
    best
}
