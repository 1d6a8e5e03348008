//! The API status of a simulated pod, rendered from the kubelet's view of
//! it ([`PodRun`]) the way the real kubelet's `generateAPIPodStatus` does:
//! container and init container statuses (`state`, `lastState`,
//! `restartCount`, `started`, `ready`), the phase, and the conditions the
//! kubelet owns (`PodReadyToStartContainers`, `Initialized`,
//! `ContainersReady`, `Ready`, and `AllContainersRestarting` for pods with a
//! `RestartAllContainers` rule) with their real reasons and messages.
//! Conditions of other writers (`PodScheduled`, `DisruptionTarget`, ...) are
//! kept.
//!
//! [`fingerprint`] condenses the part of a status the kubelet writes, read
//! back through the same typed structs, so that what the kubelet would
//! write is compared with what the server holds without keeping whole
//! statuses of 20,000 pods in memory.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::pod::{CRun, CState, PodRun, Stage, Term};
use super::spec::{ContainerSpec, Kind};

/// Condition types the kubelet owns (it replaces them; others are kept).
pub(crate) const KUBELET_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "AllContainersRestarting",
];

/// `lastTransitionTime` of each kubelet condition, kept per pod so that a
/// condition's time moves only when its status does.
#[derive(Debug, Clone, Default)]
pub(crate) struct Transitions(HashMap<&'static str, (bool, Timestamp)>);

impl Transitions {
    fn at(&mut self, ctype: &'static str, status: bool) -> Time {
        let e = self.0.entry(ctype).or_insert((status, Timestamp::now()));
        if e.0 != status {
            *e = (status, Timestamp::now());
        }
        Time(e.1)
    }
}

/// A stable, fake image digest (the same image reports the same ID).
fn image_id(image: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in image.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{image}@sha256:{h:016x}{:016x}", h.rotate_left(17))
}

fn terminated(t: &Term) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: t.code,
            reason: Some(t.reason.clone()),
            started_at: Some(Time(t.started)),
            finished_at: Some(Time(t.finished)),
            container_id: Some(t.id.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_status(spec: &ContainerSpec, run: &CRun, waiting: &str) -> ContainerStatus {
    let (state, started, ready, id) = match &run.state {
        CState::Waiting | CState::Creating { .. } => (
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(waiting.to_owned()),
                    message: None,
                }),
                ..Default::default()
            },
            false,
            false,
            None,
        ),
        CState::Running {
            since,
            started,
            ready,
            ..
        } => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*since)),
                }),
                ..Default::default()
            },
            *started,
            *ready,
            Some(run.id.clone()),
        ),
        // A regular init container that succeeded counts as ready.
        CState::Terminated { term, .. } => (
            terminated(term),
            false,
            spec.kind == Kind::Init && term.code == 0,
            Some(term.id.clone()),
        ),
    };
    ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone(),
        image_id: image_id(&spec.image),
        container_id: id,
        ready,
        started: Some(started),
        restart_count: run.restarts,
        state: Some(state),
        last_state: run.last.as_ref().map(terminated),
        ..Default::default()
    }
}

fn condition(
    tr: &mut Transitions,
    ctype: &'static str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) -> PodCondition {
    PodCondition {
        type_: ctype.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message: message.filter(|m| !m.is_empty()),
        last_transition_time: Some(tr.at(ctype, ok)),
        ..Default::default()
    }
}

/// Go's `fmt` of a `[]string`: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

impl PodRun {
    /// The phase (`getPhase`, with KEP-5532's Pending during an in-place
    /// restart).
    pub(crate) fn phase(&self) -> &'static str {
        if let Some(p) = self.terminal {
            return p;
        }
        match self.stage {
            Stage::Admitting { .. } | Stage::Init(_) => "Pending",
            Stage::Killing { .. } | Stage::Stopping { .. } | Stage::Done => {
                if self.initialized && !self.in_place {
                    "Running"
                } else {
                    "Pending"
                }
            }
            Stage::Main => {
                let never_started = self
                    .main
                    .iter()
                    .any(|c| matches!(c.state, CState::Waiting | CState::Creating { .. }));
                if self.in_place || never_started {
                    "Pending"
                } else {
                    "Running"
                }
            }
        }
    }

    /// The status the kubelet reports now; `foreign` are the conditions of
    /// other writers, kept as they are.
    pub(crate) fn status(&self, tr: &mut Transitions, foreign: &[PodCondition]) -> PodStatus {
        let waiting = self.spec.waiting_reason();
        let inits: Vec<ContainerStatus> = self
            .spec
            .init
            .iter()
            .zip(&self.init)
            .map(|(s, r)| container_status(s, r, waiting))
            .collect();
        let mains: Vec<ContainerStatus> = self
            .spec
            .main
            .iter()
            .zip(&self.main)
            .map(|(s, r)| container_status(s, r, waiting))
            .collect();
        let phase = self.phase();
        let terminal_reason = match self.terminal {
            Some("Succeeded") => Some("PodCompleted"),
            Some(_) => Some("PodFailed"),
            None => None,
        };
        let mut conds = Vec::with_capacity(6 + foreign.len());
        conds.push(condition(
            tr,
            "PodReadyToStartContainers",
            self.pod_ip.is_some(),
            None,
            None,
        ));
        let incomplete: Vec<&str> = self
            .spec
            .init
            .iter()
            .zip(&inits)
            .filter(|(s, st)| match s.kind {
                Kind::Sidecar => st.started != Some(true),
                _ => !st.ready,
            })
            .map(|(s, _)| s.name.as_str())
            .collect();
        let initialized = self.initialized || incomplete.is_empty();
        conds.push(if initialized {
            condition(tr, "Initialized", true, None, None)
        } else {
            condition(
                tr,
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: {}",
                    go_list(&incomplete)
                )),
            )
        });
        let unready: Vec<&str> = self
            .spec
            .init
            .iter()
            .zip(&inits)
            .filter(|(s, _)| s.kind == Kind::Sidecar)
            .chain(self.spec.main.iter().zip(&mains))
            .filter(|(_, st)| !st.ready)
            .map(|(s, _)| s.name.as_str())
            .collect();
        for ctype in ["Ready", "ContainersReady"] {
            let c = match (terminal_reason, unready.is_empty()) {
                (Some(r), _) => condition(tr, ctype, false, Some(r), None),
                (None, true) => condition(tr, ctype, true, None, None),
                (None, false) => condition(
                    tr,
                    ctype,
                    false,
                    Some("ContainersNotReady"),
                    Some(format!(
                        "containers with unready status: {}",
                        go_list(&unready)
                    )),
                ),
            };
            conds.push(c);
        }
        if self.spec.could_restart_all() {
            conds.push(if self.restarting {
                condition(
                    tr,
                    "AllContainersRestarting",
                    true,
                    Some("RestartAllContainersStarted"),
                    Some("container exited with restart policy rule".into()),
                )
            } else {
                condition(tr, "AllContainersRestarting", false, terminal_reason, None)
            });
        }
        conds.extend(
            foreign
                .iter()
                .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
                .cloned(),
        );
        PodStatus {
            phase: Some(phase.to_owned()),
            conditions: Some(conds),
            host_ip: Some(self.host_ip.clone()),
            host_ips: Some(vec![HostIP {
                ip: self.host_ip.clone(),
            }]),
            pod_ip: self.pod_ip.clone(),
            pod_ips: self
                .pod_ip
                .as_ref()
                .map(|ip| vec![PodIP { ip: ip.clone() }]),
            start_time: Some(Time(self.start_time)),
            // Set by the API server on create (from the requests and
            // limits of every container, the agent sidecar's included) and
            // immutable: a merge patch without it keeps it.
            qos_class: None,
            container_statuses: Some(mains),
            init_container_statuses: (!inits.is_empty()).then_some(inits),
            ..Default::default()
        }
    }
}

/// A hash of the fields of `status` the kubelet writes, after the
/// normalisations a server applies (an empty `lastState` object, empty
/// strings dropped), so that a status read back from the server and the
/// same status rendered compare equal.
pub(crate) fn fingerprint(status: &PodStatus) -> u64 {
    let norm_c = |cs: &Option<Vec<ContainerStatus>>| -> Option<Vec<ContainerStatus>> {
        cs.as_ref().map(|v| {
            v.iter()
                .map(|c| ContainerStatus {
                    name: c.name.clone(),
                    image: c.image.clone(),
                    image_id: c.image_id.clone(),
                    container_id: c.container_id.clone().filter(|s| !s.is_empty()),
                    ready: c.ready,
                    started: c.started,
                    restart_count: c.restart_count,
                    state: c.state.clone().filter(|s| *s != ContainerState::default()),
                    last_state: c
                        .last_state
                        .clone()
                        .filter(|s| *s != ContainerState::default()),
                    ..Default::default()
                })
                .collect()
        })
    };
    let conds = status.conditions.as_ref().map(|v| {
        v.iter()
            .map(|c| PodCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().filter(|s| !s.is_empty()),
                message: c.message.clone().filter(|s| !s.is_empty()),
                last_transition_time: c.last_transition_time.clone(),
                ..Default::default()
            })
            .collect::<Vec<_>>()
    });
    let owned = PodStatus {
        phase: status.phase.clone(),
        conditions: conds,
        host_ip: status.host_ip.clone(),
        host_ips: status.host_ips.clone(),
        pod_ip: status.pod_ip.clone(),
        pod_ips: status.pod_ips.clone(),
        start_time: status.start_time.clone(),
        qos_class: status.qos_class.clone(),
        container_statuses: norm_c(&status.container_statuses),
        init_container_statuses: norm_c(&status.init_container_statuses).filter(|v| !v.is_empty()),
        ..Default::default()
    };
    let mut h = DefaultHasher::new();
    serde_json::to_string(&owned)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::kubelet::costs::PodCosts;
    use crate::actors::kubelet::spec::parse_pod;
    use serde_json::{Value, json};
    use std::time::{Duration, Instant};

    #[test]
    fn a_status_read_back_from_a_server_has_the_fingerprint_it_was_written_with() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "setup", "image": "b"}],
            "containers": [{"name": "c", "image": "i"}]}});
        let costs = PodCosts::default();
        let mut run = PodRun::new(
            parse_pod(&pod),
            "10.0.0.1".into(),
            Instant::now(),
            &costs,
            Duration::ZERO,
        );
        let t = super::super::pod::Timing {
            costs: &costs,
            restart_delay: Duration::ZERO,
        };
        run.advance(Instant::now(), t, &mut Vec::new());
        let mut tr = Transitions::default();
        let scheduled: PodCondition = serde_json::from_value(
            json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}),
        )
        .expect("condition");
        let written = run.status(&mut tr, std::slice::from_ref(&scheduled));
        // What a real server returns: empty lastState objects, null probe
        // times, fields the kubelet does not write.
        let mut back = serde_json::to_value(&written).expect("json");
        back["containerStatuses"][0]["lastState"] = json!({});
        back["conditions"][0]["lastProbeTime"] = Value::Null;
        back["nominatedNodeName"] = json!("");
        let back: PodStatus = serde_json::from_value(back).expect("status");
        assert_eq!(fingerprint(&back), fingerprint(&written));
        // Rendering again later gives the same status (transition times
        // move only with a status).
        assert_eq!(
            fingerprint(&run.status(&mut tr, &[scheduled])),
            fingerprint(&written)
        );
        let names: Vec<&str> = written
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled"
            ]
        );
    }
}
