//! `rebound sim --scenario resume`: time-to-resume per recovery tier
//! (issues #14, #21). On one simulated cluster, with the modelled pod
//! costs and the job operators' and schedulers' published client limits,
//! a job of `--job-kind` (default Volcano) and `--job-size` pods wired for
//! in-place restarts (by [`rebound::inplace::inject::inject_document`], what
//! `rebound inject` runs) is recovered once per tier, `InPlace`,
//! `ReplaceFaulty`, `Recreate`, each under a RecoveryPolicy whose
//! `spec.restart.tiers` is that tier alone. A fresh job per tier, created
//! once the previous one is gone, so that no tier inherits another's
//! restarted pods, cordoned node or cooldown. Each time is printed beside
//! its floor (`floor`), computed from the job's own containers and the
//! limits of the component that recreates its pods.
//!
//! The simulated operators create pods through this build's typed `Pod`,
//! which keeps `restartPolicyRules`; on a real control plane (`--assets`)
//! Kubeflow's and Trainer's CRDs prune the rule from the templates (see
//! docs/in-place.md), and batch Job and JobSet pods come from the real
//! kube-controller-manager's Job controller.
//!
//! Faults: a worker container exiting with code 1 (level RestartJob) for
//! `InPlace` and `Recreate`; XID 79 on the node of one pod (a node fault
//! that cordons) for `ReplaceFaulty`. Time-to-resume runs from the fault's
//! status write committed (server clock) to the status write of the last
//! pod to be back Running and Ready in the new generation (see
//! `track`); the client clock's figure is shown beside it.

mod floor;
mod kinds;
mod real;
mod real_operators;
mod report;
mod tier;
mod track;
mod writes;

pub use floor::{Floor, PodShape};
pub use kinds::{JobKind, KIND_NAMES, TIER_LABEL};
pub use real::{DEFAULT_SCHEDULER, RealPod, RealTier};
pub use real_operators::{RealOperatorsReport, measure_kinds as measure_on_real_operators};
pub use report::{GoalCheck, ResumeReport, TierResult, goals, print_text};
pub use track::{PodTracker, PodView, Resumed};
pub use writes::{RecoveryWrites, create_rate};

use std::time::Instant;

use super::env::SimEnv;
use super::{Ctl, SimArgs, load_average, peak_rss_mib, start_controller};
use crate::cluster::SimConfig;

/// The tiers, in the order they are measured.
pub const TIERS: [&str; 3] = ["InPlace", "ReplaceFaulty", "Recreate"];

/// The policy of one tier: that tier alone, a fallback far beyond any
/// resume measured here (so no tier turns into another), no saved logs.
fn policy_yaml(ns: &str, tier: &str) -> String {
    format!(
        r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: resume-{lower}, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{{TIER_LABEL}: {tier}}}}}
  cooldown: 1m
  restart: {{tiers: [{tier}], fallbackAfter: 30m}}
"#,
        lower = tier.to_lowercase()
    )
}

/// Run the scenario and return its report. Progress goes to stderr.
pub async fn measure(args: &SimArgs) -> anyhow::Result<ResumeReport> {
    args.check()?;
    let setup = Instant::now();
    let (nodes, size) = (args.nodes(), args.job_size());
    anyhow::ensure!(size > 0, "--job-size must be at least 1");
    let kind = JobKind::parse(&args.job_kind)
        .ok_or_else(|| anyhow::anyhow!("unknown --job-kind {}", args.job_kind))?;
    let run: Vec<&str> = if args.tiers.is_empty() {
        TIERS.to_vec()
    } else {
        args.tiers.iter().map(String::as_str).collect()
    };
    eprintln!(
        "sim resume: {nodes} nodes, one wired {kind:?} of {size} pods per tier ({})",
        run.join(", ")
    );
    let env = SimEnv::start(
        args,
        SimConfig {
            nodes,
            gpus_per_node: 8,
            gpus_per_pod: 0,
            server_threads: 2,
            kubelet: crate::actors::kubelet::KubeletConfig {
                costs: args.pod_costs.clone(),
                ..Default::default()
            },
            operator_limits: args.operator_limits.clone(),
            // A deleted pod stays until its kubelet stopped it, as on a
            // real server: a recreate pays the old pods' stop.
            hold_pod_deletion: true,
            ..SimConfig::default()
        },
    )
    .await?;
    // The bed's apply maps `sim` to this run's namespace (on a shared
    // cluster it carries the run's suffix), as for SIM_POLICY.
    for tier in TIERS {
        env.bed.apply_yaml(&policy_yaml("sim", tier)).await?;
    }
    let real = if args.real_node {
        match real::RealSide::start(&env, args).await {
            Ok(r) => Some(r),
            Err(e) => {
                env.finish_run(args.keep_audit_log.as_deref()).await;
                return Err(e);
            }
        }
    } else {
        None
    };
    let ctl = start_controller(&env, args).await?;
    let setup_seconds = setup.elapsed().as_secs_f64();
    eprintln!(
        "sim resume: {} and the controller ready after {setup_seconds:.1}s",
        env.description
    );
    let mut notes = env.notes.clone();
    if let Some(load) = load_average() {
        notes.push(format!(
            "machine load (1-minute average) when the first tier began: {load} on {} CPUs",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ));
    }
    let real_cp = matches!(env.server, super::env::Server::ControlPlane(_));
    let shape = kind
        .manifests(&env, "floor", "InPlace", size)?
        .iter()
        .find_map(|(_, d)| PodShape::of_manifest(d))
        .unwrap_or_default();
    let pods = u32::try_from(size).unwrap_or(u32::MAX);
    let floors = [
        floor::in_place(&args.pod_costs, &shape),
        // ReplaceFaulty: the faulty node's pods are recreated (a few, no
        // rate term), the others restart in place: the larger of the two.
        {
            let f = floor::recreate(kind, 1, &args.pod_costs, &args.operator_limits, &shape);
            let ip = floor::in_place(&args.pod_costs, &shape);
            if f.total_s() > ip.total_s() { f } else { ip }
        },
        floor::recreate(kind, pods, &args.pod_costs, &args.operator_limits, &shape),
    ];
    let mut tiers = Vec::new();
    for (tier, floor) in TIERS.into_iter().zip(floors) {
        if !run.contains(&tier) {
            continue;
        }
        let r = tier::run_tier(&env, kind, tier, size, floor, real.as_ref(), &mut notes).await;
        match r {
            Ok(t) => tiers.push(t),
            Err(e) => {
                stop_controller(ctl).await;
                let e = match &real {
                    Some(r) => e.context(format!(
                        "the real node's logs are in {}",
                        r.dir().join("logs").display()
                    )),
                    None => e,
                };
                if let Some(r) = real {
                    r.stop();
                }
                env.finish_run(args.keep_audit_log.as_deref()).await;
                return Err(e.context(format!("tier {tier}")));
            }
        }
    }
    if let Some(r) = &real {
        notes.extend(real::real_notes(r.name(), r.pods, &tiers));
    }
    if let Some(rss) = stop_controller(ctl).await {
        notes.push(format!(
            "controller peak RSS {rss:.1} MiB (its own process)"
        ));
    }
    notes.push("each tier ran on a fresh job, created once the previous tier's job and pods were gone; the node made faulty for ReplaceFaulty stays cordoned for Recreate".into());
    notes.extend(floor::floor_notes(kind, &shape, &tiers, size, args));
    let mut goals = goals(&tiers);
    if !args.tiers.is_empty() {
        // --tiers left some out: no goal fails for a tier not asked for.
        goals.retain(|g| !g.detail.ends_with("not run"));
    }
    let mut report = ResumeReport {
        scenario: "resume".into(),
        nodes,
        job_size: size,
        job_kind: format!("{}, wired by rebound inject", kind.describe()),
        pods_from: if args.real_scheduler {
            format!(
                "{} (with --real-scheduler the real kube-scheduler binds them instead: see scheduler)",
                kind.pods_from(real_cp)
            )
        } else {
            kind.pods_from(real_cp).into()
        },
        scheduler: if args.real_scheduler {
            format!(
                "kube-scheduler v1.36.2 of --assets (profile {DEFAULT_SCHEDULER}, client 50/s, burst 100), for every pod of the job; the simulated scheduler places none"
            )
        } else if real.is_some() {
            "the simulated scheduler for the simulated nodes' pods; the real node's pods are bound by their template (spec.nodeName)".into()
        } else {
            "the simulated scheduler".into()
        },
        real_node: real.as_ref().map(|r| {
            format!(
                "{}: kubelet v1.36.2, containerd, runc; {} pod(s) of each job on it, one Volcano task each (host network, a probe port each), beside {size} on the simulated nodes",
                r.name(),
                r.pods
            )
        }),
        operator_limits: args.operator_limits.to_string(),
        app_start_s: args.app_start.as_secs_f64(),
        pod_shape: shape,
        server: env.description.clone(),
        server_timing: match &env.server {
            super::env::Server::Embedded => Some("embedded request log".into()),
            super::env::Server::ControlPlane(_) => Some("kube-apiserver audit log".into()),
            super::env::Server::Kubeconfig => None,
        },
        pod_costs: args.pod_costs.to_string(),
        setup_seconds,
        tiers,
        goals,
        notes,
        real_operators: None,
    };
    if let Some(r) = real {
        r.stop();
    }
    env.finish_run(args.keep_audit_log.as_deref()).await;
    if args.real_operators.is_some() {
        let ro = real_operators::measure(args, kind, size, &report.tiers).await?;
        report.goals.push(real_operators::goal(&ro));
        report.real_operators = Some(ro);
    }
    Ok(report)
}

async fn stop_controller(ctl: Ctl) -> Option<f64> {
    match ctl {
        Ctl::Child(mut child, pid, _) => {
            let rss = peak_rss_mib(pid);
            let _ = child.kill().await;
            rss
        }
        Ctl::InProcess(h) => {
            h.shutdown().await;
            None
        }
    }
}
