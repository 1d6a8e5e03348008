//! What starting and stopping a pod costs on a real node, as modelled by
//! the simulated scheduler and kubelets, so that a restart that recreates
//! pods and one that restarts them in place can be compared on equal
//! terms.
//!
//! Every cost is a latency of one pod (kubelets and their pods work in
//! parallel), except `schedule`, a throughput shared by every pod of the
//! cluster. A fresh pod pays: scheduling, device allocation, sandbox and
//! network, then per init container image + start (+ `init` for a regular
//! one, the barrier for the restart agent), then per container image +
//! start, then `ready`. A pod restarted in place (`RestartAllContainers`)
//! keeps its sandbox, IP and devices and pays `kill` (and, from its second
//! in-place restart on, the kubelet's restart backoff), then the init
//! containers and containers again; the floors of both paths are computed
//! from a job's own containers by `crate::bench::resume` (`floor`). A deleted pod pays `stop` before its
//! kubelet confirms the deletion (what operators with fixed pod names wait
//! for before they can create the replacement).
//!
//! [`PodCosts::default`] is zero everywhere (tests, `rebound demo`);
//! [`PodCosts::modelled`] are the figures below, which `rebound sim` uses
//! unless `--pod-costs` says otherwise (`--pod-costs image=5m` for cold
//! image pulls, `--pod-costs zero` for none).
//!
//! Each figure is labelled by what it rests on: **cited** (a published
//! default or a documented behaviour, with its source) or **measured** (on
//! the test bed's real node: kubelet v1.36.2, containerd 1.6.20, runc
//! 1.1.5, one pod wired as `rebound inject` wires it, the image on the
//! node, host network, no device plugin; the 1-pod column of
//! docs/simulated-kubelet.md, "Measured on a real node", 2026-12-03).
//! One figure is neither, and 0: how long a job's own init container runs
//! (`init`), which is the workload's, not the node's. A cost the measured
//! node has no step for is 0, and says so: the figures
//! are a small, idle node's, the least a real training node pays (a GPU
//! device plugin, a CNI plugin, a multi-GB image and a training process's
//! own start and stop add to them: `--pod-costs` takes each). The job
//! operators' and schedulers' client limits, all cited, are in
//! [`crate::actors::ratelimit`].
//!
//! | cost | modelled | label | based on |
//! |---|---|---|---|
//! | `schedule` | 50 pods/s, burst 100 | cited | kube-scheduler binds each pod with one API request through a client limited by `clientConnection.qps: 50`, `burst: 100` (KubeSchedulerConfiguration v1 defaults); Volcano's pods are bound by vc-scheduler instead (2000/s, see `ratelimit`) |
//! | `devices` | 0 | measured | the node has no device plugin, so no `Allocate` (the kubelet's admission, where it would run, is inside `sandbox`'s figure); a GPU node's is not measured here |
//! | `sandbox` | 0.45 s | measured | create → `PodReadyToStartContainers` (the kubelet sees the pod, admits it, `RunPodSandbox`; no CNI call: host network) |
//! | `image` | 0 | measured | the image check of an image on the node is inside `start`'s figure; a cold pull of a training image is minutes (`--pod-costs image=`) |
//! | `start` | 0.22 s | measured | sandbox ready → the first container running (`CreateContainer` + `StartContainer`, image check included); a container started after a sidecar's startup probe waited 0.73 s (the kubelet's next sync), which the model does not tell apart |
//! | `init` | 0 | the workload's, not the node's | how long a regular init container runs is what it does, not a node's cost (not measured: the measured pod has none); its start is charged as every container's (`image` + `start`); `--pod-costs init=` for a job's real setup step |
//! | `ready` | 0.71 s | measured | agent running → its startup probe passed (`periodSeconds: 1`); a probe with a longer period waits up to that period |
//! | `stop` | 2.64 s | measured | delete → pod gone, for containers that exit at SIGTERM (the agent, `/pause`); a training process's own shutdown adds to it (at most its `terminationGracePeriodSeconds`) |
//! | `kill` | 0.99 s | measured | generation written → agent running again (1.21 s) less `start` (0.22 s): the agent seeing the generation, exiting, the kubelet noticing and killing the containers |
//! | `backoff` | 0 | measured | a second `RestartAllContainers` restart of the same pod within a minute took as long as the first (2.0 s, 2.1 s; tests/it/e2e/real_node_faults.rs): the kubelet applied no restart backoff to it; a third was not measured |
//! | `backoff-max` | 300 s | cited | the kubelet's `MaxContainerBackOff` (300 s), the cap of the container restart backoff KEP-5532 refers to; no effect while `backoff` is 0 |

use std::fmt;
use std::time::Duration;

/// Start and stop costs of pods (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct PodCosts {
    /// Pods the scheduler binds per second; 0 for no limit.
    pub schedule_rate: f64,
    /// Binds the scheduler may make at once before `schedule_rate` applies.
    pub schedule_burst: u32,
    /// Device plugin allocation, once per fresh pod.
    pub devices: Duration,
    /// Sandbox and network setup, once per fresh pod (kept by an in-place
    /// restart).
    pub sandbox: Duration,
    /// Image check (or pull) before each container start.
    pub image: Duration,
    /// Creating and starting each container.
    pub start: Duration,
    /// How long each regular init container runs.
    pub init: Duration,
    /// From a container's start to its first successful probe (startup or
    /// readiness); containers without probes are ready at once.
    pub ready: Duration,
    /// Graceful stop of a deleted pod (capped by its grace period).
    pub stop: Duration,
    /// Killing the containers of a pod restarted in place.
    pub kill: Duration,
    /// The kubelet's restart backoff before a pod's second in-place
    /// restart (KEP-5532 applies the container restart backoff to them):
    /// doubling for each further one, at most `backoff_max`; the first
    /// restart waits nothing.
    pub backoff: Duration,
    /// The longest restart backoff; a pod without an in-place restart for
    /// twice this long starts again from none.
    pub backoff_max: Duration,
}

impl Default for PodCosts {
    /// No costs: pods start at once (tests and `rebound demo`).
    fn default() -> Self {
        Self {
            schedule_rate: 0.0,
            schedule_burst: 0,
            devices: Duration::ZERO,
            sandbox: Duration::ZERO,
            image: Duration::ZERO,
            start: Duration::ZERO,
            init: Duration::ZERO,
            ready: Duration::ZERO,
            stop: Duration::ZERO,
            kill: Duration::ZERO,
            backoff: Duration::ZERO,
            backoff_max: Duration::ZERO,
        }
    }
}

/// Why a `--pod-costs` value was refused.
#[derive(Debug, thiserror::Error)]
pub enum CostsError {
    /// An item is not `key=value` or a known base.
    #[error("pod costs: {0:?} is not key=value (keys: {KEYS})")]
    Item(String),
    /// The key is unknown.
    #[error("pod costs: unknown key {0:?} (keys: {KEYS})")]
    Key(String),
    /// The value does not parse.
    #[error("pod costs: {key}={value}: {why}")]
    Value {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What was wrong.
        why: String,
    },
}

const KEYS: &str = "schedule (pods/s), schedule-burst, devices, sandbox, image, start, init, ready, stop, kill, backoff, backoff-max; bases: modelled, zero";

impl PodCosts {
    /// The modelled costs of a real node: each measured on the test bed's
    /// real node or cited (the table in the module documentation).
    pub fn modelled() -> Self {
        Self {
            // cited: KubeSchedulerConfiguration v1 clientConnection defaults
            schedule_rate: 50.0,
            schedule_burst: 100,
            // measured: no device plugin on the node, no step
            devices: Duration::ZERO,
            // measured: create → PodReadyToStartContainers
            sandbox: Duration::from_millis(450),
            // measured: inside `start` (image on the node)
            image: Duration::ZERO,
            // measured: sandbox ready → first container running
            start: Duration::from_millis(220),
            // not a node cost: how long a setup step runs is the job's own
            init: Duration::ZERO,
            // measured: running → startup probe passed (period 1 s)
            ready: Duration::from_millis(710),
            // measured: delete → gone, containers exiting at SIGTERM
            stop: Duration::from_millis(2640),
            // measured: generation → agent running again, less `start`
            kill: Duration::from_millis(990),
            // measured: no backoff at a second restart within a minute
            backoff: Duration::ZERO,
            // cited: the kubelet's MaxContainerBackOff
            backoff_max: Duration::from_secs(300),
        }
    }

    /// The costs `PodCosts::modelled` had before any was measured (round
    /// estimates: 1 s per step, 2 s for a sandbox and a probe): the
    /// sequencing tests use them because their steps are easy to follow.
    #[cfg(test)]
    pub(crate) fn round() -> Self {
        Self {
            schedule_rate: 50.0,
            schedule_burst: 100,
            devices: Duration::from_secs(1),
            sandbox: Duration::from_secs(2),
            image: Duration::from_secs(1),
            start: Duration::from_secs(1),
            init: Duration::from_secs(1),
            ready: Duration::from_secs(2),
            stop: Duration::from_secs(5),
            kill: Duration::from_millis(500),
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
        }
    }

    /// Parses `--pod-costs`: comma-separated `key=value` items over the
    /// modelled costs, or over none when the first item is `zero`
    /// (`modelled` names the default base). Durations are humantime
    /// (`3s`, `500ms`, `2m`); `schedule` is pods per second (`50` or
    /// `50/s`; `0` for no limit).
    pub fn parse(spec: &str) -> Result<Self, CostsError> {
        let mut items = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .peekable();
        let mut c = match items.peek().copied() {
            Some("zero") | Some("none") => {
                items.next();
                PodCosts::default()
            }
            Some("modelled") | Some("modeled") => {
                items.next();
                PodCosts::modelled()
            }
            _ => PodCosts::modelled(),
        };
        for item in items {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| CostsError::Item(item.to_owned()))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |why: String| CostsError::Value {
                key: k.to_owned(),
                value: v.to_owned(),
                why,
            };
            let dur = || humantime::parse_duration(v).map_err(|e| bad(e.to_string()));
            match k {
                "schedule" => {
                    let n = v.strip_suffix("/s").unwrap_or(v);
                    c.schedule_rate = n
                        .parse::<f64>()
                        .ok()
                        .filter(|r| r.is_finite() && *r >= 0.0)
                        .ok_or_else(|| bad("pods per second, a number >= 0".into()))?;
                }
                "schedule-burst" => {
                    c.schedule_burst = v.parse().map_err(|_| bad("a whole number".into()))?;
                }
                "devices" => c.devices = dur()?,
                "sandbox" => c.sandbox = dur()?,
                "image" => c.image = dur()?,
                "start" => c.start = dur()?,
                "init" => c.init = dur()?,
                "ready" => c.ready = dur()?,
                "stop" => c.stop = dur()?,
                "kill" => c.kill = dur()?,
                "backoff" => c.backoff = dur()?,
                "backoff-max" => c.backoff_max = dur()?,
                _ => return Err(CostsError::Key(k.to_owned())),
            }
        }
        Ok(c)
    }

    /// The backoff before an in-place restart of a pod that had
    /// `previous` of them within the window: none for the first, then
    /// `backoff` doubling, at most `backoff_max`.
    pub fn restart_backoff(&self, previous: u32) -> Duration {
        if previous == 0 {
            return Duration::ZERO;
        }
        let doublings = (previous - 1).min(16);
        (self.backoff * (1u32 << doublings)).min(self.backoff_max)
    }

    /// Whether every cost is zero (nothing to wait for).
    pub fn is_zero(&self) -> bool {
        *self == PodCosts::default()
    }
}

impl fmt::Display for PodCosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: Duration| humantime::format_duration(d).to_string();
        let sched = if self.schedule_rate > 0.0 {
            format!("{}/s", self.schedule_rate)
        } else {
            "0".to_owned()
        };
        write!(
            f,
            "schedule={sched},schedule-burst={},devices={},sandbox={},image={},start={},init={},ready={},stop={},kill={},backoff={},backoff-max={}",
            self.schedule_burst,
            d(self.devices),
            d(self.sandbox),
            d(self.image),
            d(self.start),
            d(self.init),
            d(self.ready),
            d(self.stop),
            d(self.kill),
            d(self.backoff),
            d(self.backoff_max),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_apply_over_the_modelled_costs_or_over_none() {
        let c = PodCosts::parse("sandbox=3s, image=5m,schedule=20/s").expect("parse");
        assert_eq!(c.sandbox, Duration::from_secs(3));
        assert_eq!(c.image, Duration::from_secs(300));
        assert_eq!(c.schedule_rate, 20.0);
        assert_eq!(c.start, PodCosts::modelled().start, "others modelled");
        let z = PodCosts::parse("zero,kill=1s").expect("parse");
        assert_eq!(z.kill, Duration::from_secs(1));
        assert_eq!(z.sandbox, Duration::ZERO);
        assert!(PodCosts::parse("zero").expect("zero").is_zero());
        assert_eq!(PodCosts::parse("").expect("empty"), PodCosts::modelled());
        assert_eq!(
            PodCosts::parse("modelled").expect("m"),
            PodCosts::modelled()
        );
    }

    #[test]
    fn bad_items_say_what_is_wrong() {
        assert!(matches!(
            PodCosts::parse("sandbox"),
            Err(CostsError::Item(_))
        ));
        assert!(matches!(PodCosts::parse("gpu=1s"), Err(CostsError::Key(_))));
        let e = PodCosts::parse("image=soon").unwrap_err().to_string();
        assert!(e.contains("image=soon"), "{e}");
        assert!(PodCosts::parse("schedule=-1").is_err());
    }

    #[test]
    fn in_place_restarts_back_off_from_the_second_one_doubling_to_the_cap() {
        let m = PodCosts::round();
        let secs = |n| m.restart_backoff(n).as_secs();
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6, 7].map(secs),
            [0, 10, 20, 40, 80, 160, 300, 300]
        );
        assert_eq!(m.restart_backoff(u32::MAX), Duration::from_secs(300));
        assert_eq!(PodCosts::default().restart_backoff(5), Duration::ZERO);
    }

    #[test]
    fn display_round_trips() {
        let m = PodCosts::modelled();
        assert_eq!(PodCosts::parse(&m.to_string()).expect("parse"), m);
        let z = PodCosts::default();
        assert_eq!(PodCosts::parse(&format!("zero,{z}")).expect("parse"), z);
    }
}
