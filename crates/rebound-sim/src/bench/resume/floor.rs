//! The floors of time-to-resume: the least time each tier can take under
//! the modelled costs and limits, computed from the containers of the
//! job's own pod template (its init containers too, which an in-place
//! restart runs again, KEP-5532) and from the limits of the component that
//! recreates its pods. No API latency, no queueing behind other work, a
//! vc-scheduler session at the best moment: a lower bound the measurement
//! is tested against (floor ≤ measured), split into the control plane's
//! part (requests through rate-limited clients, the old pods' stop where
//! the replacement waits for it) and the pod's own part (the kubelet).

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::kinds::JobKind;
use crate::actors::kubelet::PodCosts;
use crate::actors::ratelimit::OperatorLimits;

/// What a pod of the job runs, as the floors need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PodShape {
    /// Init containers that run to completion (each run again in place).
    pub regular_inits: u32,
    /// Native sidecars (init containers with `restartPolicy: Always`, the
    /// restart agent among them).
    pub sidecars: u32,
    /// Regular containers.
    pub containers: u32,
    /// Whether a container has a readiness or startup probe (Ready waits
    /// for its first success).
    pub probed: bool,
}

impl PodShape {
    /// The shape of a pod `spec` (JSON).
    pub fn of(spec: &Value) -> Self {
        let list = |k: &str| spec[k].as_array().cloned().unwrap_or_default();
        let inits = list("initContainers");
        let sidecars = inits
            .iter()
            .filter(|c| c["restartPolicy"].as_str() == Some("Always"))
            .count();
        let containers = list("containers");
        let probed = containers
            .iter()
            .any(|c| c.get("readinessProbe").is_some() || c.get("startupProbe").is_some());
        let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Self {
            regular_inits: n(inits.len() - sidecars),
            sidecars: n(sidecars),
            containers: n(containers.len()),
            probed,
        }
    }

    /// The first pod template found in a job manifest (`template.spec` of
    /// any depth): every kind here has one template.
    pub fn of_manifest(doc: &Value) -> Option<Self> {
        fn find(v: &Value) -> Option<&Value> {
            match v {
                Value::Object(m) => {
                    if let Some(t) = m.get("template")
                        && t["spec"].get("containers").is_some()
                    {
                        return Some(&t["spec"]);
                    }
                    m.values().find_map(find)
                }
                Value::Array(a) => a.iter().find_map(find),
                _ => None,
            }
        }
        find(doc).map(Self::of)
    }

    /// The kubelet's part of starting the pod's containers, init
    /// containers first, then Ready: per regular init image + start + its
    /// run, per sidecar and container image + start, the first probe.
    pub fn containers_start(&self, c: &PodCosts) -> Duration {
        (c.image + c.start + c.init) * self.regular_inits
            + (c.image + c.start) * (self.sidecars + self.containers)
            + if self.probed { c.ready } else { Duration::ZERO }
    }
}

/// A floor, in its two parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Floor {
    /// Seconds of control plane: rate-limited requests, the old pods'
    /// stop where the new ones wait for it.
    pub control_plane_s: f64,
    /// Seconds of the pod's own start (or restart) on its node.
    pub per_pod_s: f64,
}

impl Floor {
    /// The whole floor, seconds.
    pub fn total_s(&self) -> f64 {
        self.control_plane_s + self.per_pod_s
    }
}

/// The in-place floor: the pod keeps its sandbox, IP and devices; the
/// kubelet kills its containers without grace and runs them all again
/// from the first init container (KEP-5532), the workers once the barrier
/// is lifted. No control-plane term beyond rebound's own two writes,
/// which are latency, not a rate.
pub fn in_place(c: &PodCosts, shape: &PodShape) -> Floor {
    Floor {
        control_plane_s: 0.0,
        per_pod_s: (c.kill + shape.containers_start(c)).as_secs_f64(),
    }
}

/// The recreate floor of `pods` pods of `kind`: what the component that
/// deletes and recreates them must send through its client before the last
/// one exists, the wait for the old pods where the names are reused, the
/// binding of the last one, then a fresh pod's start.
pub fn recreate(
    kind: JobKind,
    pods: u32,
    c: &PodCosts,
    l: &OperatorLimits,
    shape: &PodShape,
) -> Floor {
    let n = u64::from(pods);
    let secs = |d: Duration| d.as_secs_f64();
    let control = match kind {
        // killPods: a patch and a delete per pod, one after another
        // through the controller's client; Restarting → Pending once every
        // old pod is gone (their stop); then the creates through the same
        // client (refilled to its burst meanwhile); the gang bound by
        // vc-scheduler's own client.
        JobKind::Volcano => {
            secs(l.volcano.time_for(2 * n))
                + secs(c.stop)
                + secs(l.volcano.time_for(n))
                + secs(l.vc_scheduler.time_for(n))
        }
        // rebound deletes the pods in one request; the operator makes a
        // pod of the same name once the old one is gone (its stop), one
        // create per pod through its client; kube-scheduler binds them at
        // its rate, which keeps up unless it is the slower one.
        JobKind::PyTorchJob => {
            secs(c.stop) + secs(l.training_operator.time_for(n).max(sched_time(c, n)))
        }
        // The Job controller counts every deleted pod as failed and creates
        // no replacement until its pod failure backoff has passed since the
        // last failure (rebound's delete: a deleted pod's failure time is
        // its deletion's); then the replacements under new names, through
        // its client; kube-scheduler binds them.
        JobKind::Job => {
            secs(job_backoff(l, n)) + secs(l.job_controller.time_for(n).max(sched_time(c, n)))
        }
        // rebound deletes the child Job before its pods (as JobSet's own
        // restart does: `rebound::recover::restart_through_child_jobs`), so
        // no pod is counted as failed and there is no backoff: JobSet
        // makes the Job anew and the Job controller creates its pods
        // under new names at once.
        JobKind::JobSet | JobKind::TrainJob => {
            secs(l.job_controller.time_for(n).max(sched_time(c, n)))
        }
    };
    Floor {
        control_plane_s: control,
        per_pod_s: secs(c.devices + c.sandbox + shape.containers_start(c)),
    }
}

/// The least the Job controller's pod failure backoff after `n` deleted
/// pods can hold the creates: the backoff counts from a deleted pod's
/// `deletionTimestamp` less its grace period, and a `metav1.Time` has
/// whole seconds, so the failure time is rounded down and the wait ends up
/// to 1 s early (measured: 2 deleted pods, 20 s of backoff, creates
/// 19.6 s after the delete).
fn job_backoff(l: &OperatorLimits, n: u64) -> Duration {
    crate::actors::ratelimit::job_failure_backoff(
        n,
        l.job_failure_backoff,
        l.job_failure_backoff_max,
    )
    .saturating_sub(Duration::from_secs(1))
}

/// kube-scheduler binding `n` pods at its rate after its burst.
fn sched_time(c: &PodCosts, n: u64) -> Duration {
    crate::actors::ratelimit::ClientLimit::new(c.schedule_rate, c.schedule_burst).time_for(n)
}

/// What bounds the ratio, with the arithmetic: the floors' parts, and what
/// is not modelled. Printed as notes.
pub fn floor_notes(
    kind: JobKind,
    shape: &PodShape,
    tiers: &[super::TierResult],
    pods: usize,
    args: &crate::bench::SimArgs,
) -> Vec<String> {
    let mut out = Vec::new();
    let c = &args.pod_costs;
    let l = &args.operator_limits;
    let (Some(ip), Some(rc)) = (
        tiers.iter().find(|t| t.tier == "InPlace"),
        tiers.iter().find(|t| t.tier == "Recreate"),
    ) else {
        return out;
    };
    let n = pods as f64;
    let per = |d: std::time::Duration| d.as_secs_f64();
    let fresh = format!(
        "a fresh pod: devices {} + sandbox {} + {} init × (image {} + start {} + run {}) + {} sidecar/container × (image + start) + probe {} = {:.2} s",
        per(c.devices),
        per(c.sandbox),
        shape.regular_inits,
        per(c.image),
        per(c.start),
        per(c.init),
        shape.sidecars + shape.containers,
        per(c.ready),
        rc.floor.per_pod_s
    );
    let ctl = match kind {
        JobKind::Volcano => format!(
            "volcano-controller-manager sends 2 × {pods} requests (out-of-sync patch, delete) one after another at {} → {:.2} s, the old pods stop ({:.2} s), then {pods} creates at the same limit → {:.2} s; vc-scheduler binds {pods} at {} → {:.2} s",
            l.volcano,
            per(l.volcano.time_for(2 * pods as u64)),
            per(c.stop),
            per(l.volcano.time_for(pods as u64)),
            l.vc_scheduler,
            per(l.vc_scheduler.time_for(pods as u64))
        ),
        JobKind::PyTorchJob => format!(
            "the old pods stop ({:.2} s; the operator reuses their names), then the training-operator creates {pods} pods at {} → {:.2} s",
            per(c.stop),
            l.training_operator,
            per(l.training_operator.time_for(pods as u64))
        ),
        JobKind::JobSet | JobKind::TrainJob => format!(
            "rebound deletes the child Job, then its pods: no pod counts as failed, so no failure backoff; JobSet makes the Job anew and the Job controller creates {pods} pods at {} → {:.2} s (slow start and its 500-per-sync cap cost round trips, not rate)",
            l.job_controller,
            per(l.job_controller.time_for(pods as u64))
        ),
        JobKind::Job => format!(
            "the Job controller counts the {pods} deleted pods as failed and waits its pod failure backoff ({} doubled per failure, at most {}; from the last failure, rounded down to the second) → at least {:.2} s, then creates {pods} replacements at {} → {:.2} s (slow start and its 500-per-sync cap cost round trips, not rate)",
            humantime::format_duration(l.job_failure_backoff),
            humantime::format_duration(l.job_failure_backoff_max),
            per(job_backoff(l, pods as u64)),
            l.job_controller,
            per(l.job_controller.time_for(pods as u64))
        ),
    };
    let ratio = rc.floor.total_s() / ip.floor.total_s().max(f64::EPSILON);
    out.push(format!(
        "floors: in place {:.2} s (kill {} + the pod's init containers, agent and worker again + probe; sandbox, IP and devices kept); recreate {:.2} s = control plane {:.2} s ({ctl}) + {fresh}; at most {ratio:.1}× apart at these costs and limits",
        ip.floor.total_s(), per(c.kill), rc.floor.total_s(), rc.floor.control_plane_s
    ));
    if ratio < 10.0 {
        let need = 10.0 * ip.floor.total_s() - rc.floor.per_pod_s;
        out.push(format!(
            "≥10× is out of reach for this kind at these defaults: it needs a recreate floor of 10 × {:.2} = {:.2} s, i.e. a control-plane term of {:.2} s besides the {:.2} s of a fresh start; the control plane of {pods} pods here costs {:.2} s ({:.1} ms a pod)",
            ip.floor.total_s(), 10.0 * ip.floor.total_s(), need, rc.floor.per_pod_s,
            rc.floor.control_plane_s, 1000.0 * rc.floor.control_plane_s / n
        ));
    }
    if kind == JobKind::Job {
        out.push(format!(
            "not modelled, and paid by a real Job controller: removing the job-tracking finalizer of each of the {pods} deleted pods, one patch each through the same client ({:.2} s at {} if alone; during the failure backoff, so it delays no create unless the backoff is shorter); leaving it out favours recreate",
            per(l.job_controller.time_for(pods as u64)), l.job_controller
        ));
    }
    if kind == JobKind::Volcano {
        out.push("not modelled: the PodGroup's deletion and re-creation by volcano-controller-manager and its enqueue by vc-scheduler before the controller creates the pods (up to one more session); leaving them out favours recreate".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wired() -> PodShape {
        PodShape::of(&json!({
            "initContainers": [{"name": "setup"}, {"name": "rebound-restart-agent", "restartPolicy": "Always"}],
            "containers": [{"name": "worker", "readinessProbe": {"periodSeconds": 5}}],
        }))
    }

    #[test]
    fn the_shape_counts_init_containers_sidecars_and_probes() {
        assert_eq!(
            wired(),
            PodShape {
                regular_inits: 1,
                sidecars: 1,
                containers: 1,
                probed: true
            }
        );
        let doc =
            json!({"spec": {"tasks": [{"template": {"spec": {"containers": [{"name": "c"}]}}}]}});
        assert_eq!(
            PodShape::of_manifest(&doc).map(|s| (s.containers, s.probed)),
            Some((1, false))
        );
    }

    #[test]
    fn the_in_place_floor_runs_the_init_containers_again() {
        let m = PodCosts::round();
        // kill 0.5 + setup (1 + 1 + 1) + agent (1 + 1) + worker (1 + 1) + probe 2
        let f = in_place(&m, &wired());
        assert_eq!(f.control_plane_s, 0.0);
        assert!((f.per_pod_s - 9.5).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn the_modelled_floors_are_the_documented_ones() {
        // docs/simulated-kubelet.md and the README quote these.
        let (m, l, s) = (PodCosts::modelled(), OperatorLimits::published(), wired());
        // kill 0.99 + setup 0.22 + agent 0.22 + worker 0.22 + probe 0.71
        let f = in_place(&m, &s);
        assert!((f.per_pod_s - 2.36).abs() < 1e-9, "{f:?}");
        // sandbox 0.45 + 3 starts of 0.22 + probe 0.71
        let v = recreate(JobKind::Volcano, 1024, &m, &l, &s);
        assert!((v.per_pod_s - 1.82).abs() < 1e-9, "{v:?}");
        // + stop 2.64 between Volcano's kills and its creates
        assert!(
            (v.control_plane_s - (38.96 + 2.64 + 18.48)).abs() < 1e-9,
            "{v:?}"
        );
    }

    #[test]
    fn recreate_floors_follow_each_operator_s_limits() {
        let (m, l, s) = (PodCosts::round(), OperatorLimits::published(), wired());
        // fresh: devices 1 + sandbox 2 + 9 of containers
        let v = recreate(JobKind::Volcano, 1024, &m, &l, &s);
        assert!((v.per_pod_s - 12.0).abs() < 1e-9);
        // (2,048 - 100) / 50 + stop 5 + (1,024 - 100) / 50 + 0 (2,000 at once)
        assert!(
            (v.control_plane_s - (38.96 + 5.0 + 18.48)).abs() < 1e-9,
            "{v:?}"
        );
        // stop 5 + (1,024 - 30) / 20
        let p = recreate(JobKind::PyTorchJob, 1024, &m, &l, &s);
        assert!((p.control_plane_s - (5.0 + 49.7)).abs() < 1e-9, "{p:?}");
        // The failure backoff's cap, 600 s (less its rounding to the
        // second), then (1,024 - 30) / 20.
        let j = recreate(JobKind::Job, 1024, &m, &l, &s);
        assert!((j.control_plane_s - (599.0 + 49.7)).abs() < 1e-9, "{j:?}");
        // 2 deleted pods: 20 s of backoff, 2 creates within the burst.
        let two = recreate(JobKind::Job, 2, &m, &l, &s);
        assert!((two.control_plane_s - 19.0).abs() < 1e-9, "{two:?}");
        // A JobSet's (and a TrainJob's) child Job is deleted before its
        // pods: no failure, no backoff; (1,024 - 30) / 20 of creates.
        for k in [JobKind::JobSet, JobKind::TrainJob] {
            let js = recreate(k, 1024, &m, &l, &s);
            assert!((js.control_plane_s - 49.7).abs() < 1e-9, "{k:?}: {js:?}");
        }
        // Without limits only the stop and kube-scheduler's rate remain.
        let free = recreate(JobKind::Job, 1024, &m, &OperatorLimits::none(), &s);
        assert!((free.control_plane_s - (1024.0 - 100.0) / 50.0).abs() < 1e-9);
        // Every recreate floor is above the in-place one.
        for k in [
            JobKind::Volcano,
            JobKind::PyTorchJob,
            JobKind::TrainJob,
            JobKind::JobSet,
            JobKind::Job,
        ] {
            assert!(recreate(k, 1024, &m, &l, &s).total_s() > in_place(&m, &s).total_s());
        }
    }
}
