//! Return to service only after a validation (the root policy's
//! `nodeActions.validation`): before rebound deletes a DeviceTaintRule it
//! made, it runs the admin's check as a batch Job on the device's node and
//! returns the device only when that Job succeeds. A Job that fails, or
//! runs past the timeout, leaves the device isolated and says so once
//! (`ValidationFailed`); a person then deletes the rule (or the Job, to
//! have rebound run it again).
//!
//! The state is in the cluster: the Job is named after the rule's uid, so
//! a new controller finds the run of this isolation (and not the run of an
//! earlier isolation of the same device) and reads how it ended. The core
//! asks for its status every [`ASK_EVERY`] while it runs.

use super::effect::{EffectKind, Outcome};
use super::store::dra::{DeviceRef, RuleInfo};
use super::{Core, Now, Waiting};
use crate::policy::ValidationConfig;
use crate::recover::{Notice, reasons};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often a running validation's Job is read.
pub const ASK_EVERY: Duration = Duration::from_secs(5);
/// How often a failed validation's Job is read (to see it deleted).
pub const READ_FAILED_EVERY: Duration = Duration::from_secs(30);

/// How a validation Job stands, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Asked for (made, or found) and not answered yet.
    Asked,
    Running,
    Succeeded,
    Failed(String),
}

impl RunState {
    /// The state an executor's answer names (`Outcome::Ok(text)`).
    pub fn parse(text: &str) -> RunState {
        match text {
            "Succeeded" => RunState::Succeeded,
            "Running" => RunState::Running,
            t => RunState::Failed(t.strip_prefix("Failed: ").unwrap_or(t).to_string()),
        }
    }
}

#[derive(Clone, Debug)]
struct Run {
    node: String,
    started: DateTime<Utc>,
    asked: DateTime<Utc>,
    state: RunState,
    announced: bool,
}

/// The validations under way, by Job name.
#[derive(Debug, Default)]
pub struct ValidationBook {
    runs: BTreeMap<String, Run>,
    /// Jobs found gone, their node and when: made again [`ASK_EVERY`]
    /// later.
    gone: BTreeMap<String, (String, DateTime<Utc>)>,
}

impl ValidationBook {
    /// Nodes with a validation to follow (read again on ticks; a failed
    /// one is read now and then to see it deleted).
    pub fn nodes(&self) -> impl Iterator<Item = &String> {
        self.runs
            .values()
            .map(|r| &r.node)
            .chain(self.gone.values().map(|(n, _)| n))
    }
}

/// What the caller may do with the isolation.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The validation passed: return the device.
    Return,
    /// Not yet, or failed: keep it.
    Keep,
}

/// The name of the validation Job of one isolation (`key`: its rule's
/// uid, or the node's uid and the time of its cordon).
pub fn job_name(key: &str) -> String {
    let id = super::occurrence::fingerprint(&("validation", key));
    format!("rebound-validate-{:016x}", id as u64)
}

/// What a validation is about.
#[derive(Clone, Debug)]
pub struct Subject {
    pub node: String,
    /// The isolation's own identity: a later isolation of the same device
    /// or node is validated anew.
    pub key: String,
    /// `device gpu.nvidia.com/n1/gpu-3`, `node n1`: for the Event.
    pub what: String,
    /// How a person returns it without the validation.
    pub by_hand: String,
    /// The Job's `rebound.dev/validation` label: `device` or `node`.
    pub label: &'static str,
    /// The decision metric's action.
    pub action: &'static str,
    pub env: Vec<(String, String)>,
}

impl Subject {
    /// The validation of a device's isolation by `rule`; `None` until the
    /// rule's watch event gave its uid.
    pub fn device(
        node: &str,
        device: &DeviceRef,
        rule: &RuleInfo,
        env: Vec<(String, String)>,
    ) -> Option<Subject> {
        Some(Subject {
            node: node.to_string(),
            key: rule.uid.clone()?,
            what: format!("Device {device}"),
            by_hand: format!("delete DeviceTaintRule {}", rule.name),
            label: "device",
            action: "validate_device",
            env: [
                vec![
                    ("REBOUND_NODE".to_string(), node.to_string()),
                    ("REBOUND_DEVICE".to_string(), device.device.clone()),
                    ("REBOUND_DRA_DEVICE".to_string(), device.to_string()),
                    ("REBOUND_FAULT_CODE".to_string(), rule.value.clone()),
                ],
                env,
            ]
            .concat(),
        })
    }

    /// The validation of a node's cordon (`validation.nodes`).
    pub fn node(node: &super::store::NodeInfo) -> Subject {
        let at = node
            .separated_at
            .map(|t| t.timestamp_millis().to_string())
            .unwrap_or_default();
        let reason = node
            .snap
            .annotations
            .get(crate::recover::CORDON_REASON_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        Subject {
            node: node.name.clone(),
            key: format!(
                "{}/{at}",
                node.uid.clone().unwrap_or_else(|| node.name.clone())
            ),
            what: format!("Node {}", node.name),
            by_hand: "uncordon it".into(),
            label: "node",
            action: "validate_node",
            env: vec![
                ("REBOUND_NODE".to_string(), node.name.clone()),
                ("REBOUND_FAULT_CODE".to_string(), reason),
            ],
        }
    }
}

impl Core {
    /// Whether `subject` may return to service now, running or reading
    /// its validation as needed.
    pub(super) fn validated(
        &mut self,
        subject: &Subject,
        v: &ValidationConfig,
        now: Now,
    ) -> Verdict {
        let job = job_name(&subject.key);
        let node = subject.node.as_str();
        let timeout = chrono::Duration::from_std(v.timeout).unwrap_or_default();
        let every = chrono::Duration::from_std(ASK_EVERY).unwrap_or_default();
        // The scan that brings us here runs every ASK_EVERY too: a second
        // of slack so that it does not just miss its turn.
        let due = every - chrono::Duration::seconds(1);
        let Some(run) = self.validations.runs.get_mut(&job) else {
            if self
                .validations
                .gone
                .get(&job)
                .is_some_and(|(_, t)| now.wall - *t < due)
            {
                return Verdict::Keep;
            }
            self.validations.gone.remove(&job);
            self.metrics.decision(subject.action, "started");
            self.effect_for(
                Waiting::Validation(job.clone()),
                EffectKind::Validate {
                    namespace: self.cfg.root.clone(),
                    job: job.clone(),
                    node: node.to_string(),
                    what: subject.label.to_string(),
                    spec: v.job.clone(),
                    env: subject.env.clone(),
                    timeout: v.timeout,
                },
                None,
            );
            self.validations.runs.insert(
                job,
                Run {
                    node: node.to_string(),
                    started: now.wall,
                    asked: now.wall,
                    state: RunState::Asked,
                    announced: false,
                },
            );
            return Verdict::Keep;
        };
        match run.state.clone() {
            RunState::Succeeded => {
                self.validations.runs.remove(&job);
                self.metrics.decision(subject.action, "passed");
                Verdict::Return
            }
            RunState::Failed(why) => {
                // Read now and then: a person who deletes the Job has it
                // run again.
                let again = chrono::Duration::from_std(READ_FAILED_EVERY).unwrap_or_default();
                if now.wall - run.asked >= again {
                    run.asked = now.wall;
                    self.effect_for(
                        Waiting::Validation(job.clone()),
                        EffectKind::ReadValidation {
                            namespace: self.cfg.root.clone(),
                            job: job.clone(),
                        },
                        None,
                    );
                }
                let Some(run) = self.validations.runs.get_mut(&job) else {
                    return Verdict::Keep;
                };
                if !run.announced {
                    run.announced = true;
                    self.metrics.decision(subject.action, "failed");
                    let note = format!(
                        "{} stays out of scheduling: its validation Job {}/{job} {why}; {} to return it, or delete the Job to validate again",
                        subject.what, self.cfg.root, subject.by_hand
                    );
                    self.node_event(
                        node,
                        Notice::warning(reasons::VALIDATION_FAILED, "Validate", note),
                    );
                }
                Verdict::Keep
            }
            RunState::Asked | RunState::Running => {
                if now.wall - run.started >= timeout {
                    run.state = RunState::Failed(format!(
                        "did not succeed within {}",
                        humantime::format_duration(v.timeout)
                    ));
                    return self.validated(subject, v, now);
                }
                if now.wall - run.asked >= due {
                    run.asked = now.wall;
                    let job2 = job.clone();
                    self.effect_for(
                        Waiting::Validation(job2.clone()),
                        EffectKind::ReadValidation {
                            namespace: self.cfg.root.clone(),
                            job: job2,
                        },
                        None,
                    );
                }
                Verdict::Keep
            }
        }
    }

    /// A validation Job was made or read: its state.
    pub(super) fn validation_done(&mut self, job: &str, outcome: Outcome, now: Now) {
        let Some(run) = self.validations.runs.get_mut(job) else {
            return;
        };
        let node = run.node.clone();
        match outcome {
            Outcome::Ok(state) => {
                let s = RunState::parse(&state);
                // A run that timed out stays failed whatever comes later.
                if !matches!(run.state, RunState::Failed(_)) {
                    run.state = s;
                }
            }
            // The Job is gone (deleted by a person to run it again, or by
            // its TTL): run it anew.
            Outcome::Gone(_) => {
                self.validations.runs.remove(job);
                self.validations
                    .gone
                    .insert(job.to_string(), (node.clone(), now.wall));
            }
            Outcome::Failed(why) => {
                tracing::warn!(job, %why, "reading the validation Job failed; asked again");
            }
            Outcome::NotLeader => {}
        }
        self.dirty_nodes.insert(node);
    }
}
