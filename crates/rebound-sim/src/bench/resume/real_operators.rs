//! `rebound sim --scenario resume --assets --real-operators`: the Recreate
//! tier once more, on the real components: a control plane of its own with
//! kube-scheduler, the job kind's real operator installed from its own
//! manifests (training-operator, Volcano's controller, webhooks and
//! vc-scheduler, JobSet, Trainer, and kube-controller-manager's Job
//! controller), and the nodes and their pods played by the real KWOK
//! controller. The same wired job, the same fault, the same policy and
//! the same definition of time-to-resume (the fault's write committed →
//! the last pod of the new generation Running and Ready, server clock):
//! the model's figure (the simulated Recreate tier and its floor) can be
//! read beside what the real operators did.
//!
//! The in-place tier stays on the simulated kubelets (KWOK cannot restart
//! a pod's containers in place: its stages write statuses, they run no
//! container), so the ratio to in place divides this real recreate by the
//! in-place time of the same run. KWOK's pods cost what the simulated
//! kubelet charges (`PodCosts`, measured on the test bed's real node): its
//! `pod-ready` stage waits a fresh pod's start, its `pod-delete` stage a
//! deleted pod's stop, so the difference from the model is the control
//! plane's.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::Serialize;

use super::super::SimArgs;
use super::super::env::{RealOperatorsSetup, SimEnv};
use super::super::{load_average, start_controller};
use super::report::{by_verb, secs};
use super::writes::create_rate;
use super::{GoalCheck, JobKind, PodShape, TierResult, floor, policy_yaml, stop_controller, tier};
use crate::actors::kubelet::PodCosts;
use crate::cluster::SimConfig;
use crate::envtest::kwok::{self, PodTimes};

/// The Recreate tier on the real operators, beside the model.
#[derive(Debug, Clone, Serialize)]
pub struct RealOperatorsReport {
    /// The components that ran, with their pinned versions.
    pub components: String,
    /// Which component recreates this kind's pods, and who binds them.
    pub pods_from: String,
    /// Nodes registered for KWOK.
    pub kwok_nodes: usize,
    /// KWOK's stages and their delays, seconds.
    pub kwok_stages: Vec<(String, f64)>,
    /// The 1-minute load average before the tier and after it.
    pub load: (Option<String>, Option<String>),
    /// Seconds to start the control plane, the operators and KWOK and
    /// register the nodes.
    pub setup_seconds: f64,
    /// The tier, measured on the real components.
    pub recreate: TierResult,
    /// The model's figure: this run's simulated Recreate tier, if it ran.
    pub model_recreate_s: Option<f64>,
    /// The model's least: the recreate floor of the kind at this size.
    pub model_floor_s: f64,
    /// This run's in-place time-to-resume (simulated kubelets), if it ran.
    pub in_place_s: Option<f64>,
    /// Real-operator recreate over in place.
    pub ratio_to_in_place: Option<f64>,
    /// Remarks.
    pub notes: Vec<String>,
}

/// The version `module` is pinned to in `tools/real-components/<set>/
/// go.mod`, or `?`.
fn pinned(set: &str, module: &str) -> String {
    let path = Path::new(crate::PROJECT_ROOT)
        .join("tools/real-components")
        .join(set)
        .join("go.mod");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut t = l.trim().trim_start_matches("require").split_whitespace();
                (t.next() == Some(module))
                    .then(|| t.next().map(str::to_owned))
                    .flatten()
            })
        })
        .unwrap_or_else(|| "?".into())
}

/// The components, with the versions the build script pins.
fn components() -> String {
    format!(
        "kube-apiserver, kube-controller-manager (its Job controller) and kube-scheduler {k8s}; training-operator {to}; Volcano {vc} (vc-webhook-manager, vc-controller-manager, vc-scheduler); JobSet {js}; Trainer {tr}; KWOK {kwok}",
        k8s = pinned("kubernetes-1.36", "k8s.io/kubernetes"),
        to = pinned("training-operator", "github.com/kubeflow/training-operator"),
        vc = pinned("volcano", "volcano.sh/volcano"),
        js = pinned("operators", "sigs.k8s.io/jobset"),
        tr = pinned("operators", "github.com/kubeflow/trainer/v2"),
        kwok = pinned("operators", "sigs.k8s.io/kwok"),
    )
}

/// Which real component makes the kind's pods, and which scheduler binds
/// them.
fn pods_from(kind: JobKind) -> &'static str {
    match kind {
        JobKind::Volcano => {
            "vc-controller-manager (its defaults: client 50/s, burst 100), a RestartJob Command; bound by vc-scheduler"
        }
        JobKind::PyTorchJob => {
            "training-operator (its defaults: client 20/s, burst 30); bound by kube-scheduler"
        }
        JobKind::Job => {
            "kube-controller-manager's Job controller (client 20/s, burst 30); bound by kube-scheduler"
        }
        JobKind::JobSet => {
            "JobSet's controller (the Job) and kube-controller-manager's Job controller (the pods); bound by kube-scheduler"
        }
        JobKind::TrainJob => {
            "Trainer (the JobSet), JobSet's controller (the Job) and kube-controller-manager's Job controller (the pods); bound by kube-scheduler"
        }
    }
}

/// What KWOK's pods cost: a fresh pod's start (devices, sandbox, the
/// pod's containers and first probe) and a deleted pod's stop, from the
/// simulated kubelet's costs.
pub fn pod_times(c: &PodCosts, shape: &PodShape) -> PodTimes {
    PodTimes {
        ready: c.devices + c.sandbox + shape.containers_start(c),
        stop: c.stop,
    }
}

/// The number of KWOK nodes: `--kwok-nodes`, else one node per 8 pods
/// (a training job's one pod per GPU of an 8-GPU node).
pub fn kwok_nodes(args: &SimArgs, pods: usize) -> usize {
    args.kwok_nodes.unwrap_or(pods.div_ceil(8)).max(1)
}

/// Registers `n` nodes for KWOK (`kwok-0000`, …) and waits until KWOK has
/// made every one Ready.
async fn register_nodes(env: &SimEnv, n: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(env.bed.client());
    let mut made = futures::stream::iter(0..n)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("kwok-{i:04}");
                let (obj, status) = kwok::node(&name);
                let obj: Node = serde_json::from_value(obj)?;
                nodes.create(&PostParams::default(), &obj).await?;
                nodes
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16);
    while let Some(r) = made.next().await {
        r?;
    }
    let sel = ListParams::default().labels(&format!(
        "{}={}",
        kwok::NODE_TYPE_LABEL.0,
        kwok::NODE_TYPE_LABEL.1
    ));
    let start = Instant::now();
    loop {
        let ready = nodes
            .list(&sel)
            .await?
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= n {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(180),
            "KWOK made {ready} of {n} nodes Ready in 180 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Copies KWOK's and the operators' logs beside the kept audit log `k`
/// (`X.kwok.log`, `X.<operator>.log`): the control plane's directory goes
/// with it. A failed copy is said on stderr; the figures are out already.
fn keep_logs(started: &RealOperatorsSetup, k: &Path) {
    let mut logs = vec![(started.kwok_log.clone(), k.with_extension("kwok.log"))];
    for name in &started.operators {
        logs.push((
            started.operators_dir.join(format!("{name}.log")),
            k.with_extension(format!("{name}.log")),
        ));
    }
    for (from, to) in logs {
        if let Err(e) = std::fs::copy(&from, &to) {
            eprintln!("sim: keeping {}: {e}", from.display());
        }
    }
}

/// Runs the Recreate tier of a `kind` job of `size` pods on the real
/// components and puts it beside the model: the recreate floor and the
/// tiers this run measured on the simulated side (`simulated`).
pub async fn measure(
    args: &SimArgs,
    kind: JobKind,
    size: usize,
    simulated: &[TierResult],
) -> anyhow::Result<RealOperatorsReport> {
    let mut r = measure_kinds(args, &[(kind, size)])
        .await?
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no job was measured on the real operators"))?;
    let of = |name: &str| simulated.iter().find(|t| t.tier == name && t.resumed);
    r.in_place_s = of("InPlace").and_then(|t| t.time_to_resume_s);
    r.model_recreate_s = of("Recreate").and_then(|t| t.time_to_resume_s);
    r.ratio_to_in_place = match (r.recreate.time_to_resume_s, r.in_place_s) {
        (Some(x), Some(i)) if r.recreate.resumed && i > 0.0 => Some(x / i),
        _ => None,
    };
    Ok(r)
}

/// Runs the Recreate tier of each `(kind, pods)` job in turn on one set of
/// real components (a fresh job each, as the tiers), with the floor of
/// each beside it; no simulated tier (`in_place_s`, `model_recreate_s`
/// and the ratio are `None`).
pub async fn measure_kinds(
    args: &SimArgs,
    jobs: &[(JobKind, usize)],
) -> anyhow::Result<Vec<RealOperatorsReport>> {
    let setup = Instant::now();
    let (first, _) = jobs
        .first()
        .ok_or_else(|| anyhow::anyhow!("no job to measure on the real operators"))?;
    // Every kind's pods run the same wired template (`kinds`): one start
    // for KWOK's pods.
    let shape = first.pod_shape()?;
    for (k, _) in jobs {
        anyhow::ensure!(
            k.pod_shape()? == shape,
            "{k:?}'s pods differ from {first:?}'s: KWOK gives every pod one start"
        );
    }
    let times = pod_times(&args.pod_costs, &shape);
    let n_nodes = kwok_nodes(args, jobs.iter().map(|(_, n)| *n).max().unwrap_or(1));
    let (env, started) = SimEnv::start_real_operators(
        args,
        SimConfig {
            nodes: 0,
            server_threads: 2,
            ..SimConfig::default()
        },
        times,
    )
    .await?;
    eprintln!(
        "sim resume: real operators and KWOK ready after {:.1}s; registering {n_nodes} KWOK nodes",
        started.start_seconds
    );
    let result = async {
        register_nodes(&env, n_nodes).await?;
        env.bed.apply_yaml(&policy_yaml("sim", "Recreate")).await?;
        let ctl = start_controller(&env, args).await?;
        let setup_seconds = setup.elapsed().as_secs_f64();
        let mut out = Vec::new();
        for (kind, size) in jobs {
            let pods = u32::try_from(*size).unwrap_or(u32::MAX);
            let floor =
                floor::recreate(*kind, pods, &args.pod_costs, &args.operator_limits, &shape);
            let load_before = load_average();
            let mut notes = Vec::new();
            let r = tier::run_tier(&env, *kind, "Recreate", *size, floor, None, &mut notes).await;
            let load = (load_before, load_average());
            match r {
                Ok(t) => out.push((*kind, *size, floor, t, load, notes)),
                Err(e) => {
                    stop_controller(ctl).await;
                    return Err(e.context(format!("{kind:?}")));
                }
            }
        }
        stop_controller(ctl).await;
        anyhow::Ok((out, setup_seconds))
    }
    .await;
    let keep = args
        .keep_audit_log
        .as_ref()
        .map(|p| p.with_extension("real-operators.log"));
    let logs = format!(
        "the operators' logs are in {}, KWOK's in {}",
        started.operators_dir.display(),
        started.kwok_log.display()
    );
    if let Some(k) = &keep {
        keep_logs(&started, k);
    }
    env.finish_run(keep.as_deref()).await;
    let (measured, setup_seconds) = result
        .map_err(|e| e.context(format!("the Recreate tier on the real operators ({logs})")))?;
    Ok(measured
        .into_iter()
        .map(|(kind, size, floor, recreate, load, mut notes)| {
            notes.push(format!(
                "KWOK's pods cost what the simulated kubelet charges: pod-ready waits {:.2} s (a fresh pod's start, --pod-costs), pod-delete {:.2} s (stop); the in-place tier is not run here (KWOK runs no container, so it cannot restart one in place): the ratio divides by this run's simulated in-place time",
                times.ready.as_secs_f64(),
                times.stop.as_secs_f64()
            ));
            let created: usize = recreate.writes.created_by.values().sum();
            if created > size {
                notes.push(format!(
                    "{created} pods were created for a job of {size}: the operator recreated more than once"
                ));
            }
            RealOperatorsReport {
                components: components(),
                pods_from: pods_from(kind).into(),
                kwok_nodes: n_nodes,
                kwok_stages: started
                    .stages
                    .iter()
                    .map(|(n, d)| (n.clone(), d.as_secs_f64()))
                    .collect(),
                load,
                setup_seconds,
                recreate,
                model_recreate_s: None,
                model_floor_s: floor.total_s(),
                in_place_s: None,
                ratio_to_in_place: None,
                notes,
            }
        })
        .collect())
}

/// Design section 8's goal on the real operators: in place at least 10×
/// faster than the real operators' recreate.
pub fn goal(r: &RealOperatorsReport) -> GoalCheck {
    let goal =
        "in-place time-to-resume ≥10× shorter than recreate on the real operators".to_owned();
    match (
        r.ratio_to_in_place,
        r.recreate.time_to_resume_s,
        r.in_place_s,
    ) {
        (Some(x), Some(rc), Some(ip)) => GoalCheck {
            goal,
            pass: x >= 10.0,
            detail: format!(
                "{rc:.2} s recreate on the real operators, {ip:.2} s in place: {x:.1}×; the model's recreate {} (floor {:.2} s)",
                secs(r.model_recreate_s),
                r.model_floor_s
            ),
        },
        _ => GoalCheck {
            goal,
            pass: false,
            detail: if r.recreate.resumed {
                "InPlace not run, or no server-clock figure".into()
            } else {
                "the job did not resume on the real operators".into()
            },
        },
    }
}

/// The text form, after the tiers.
pub fn print_text(r: &RealOperatorsReport) {
    let t = &r.recreate;
    println!("  Recreate on the real components: {}", r.components);
    println!("    pods from:  {}", r.pods_from);
    println!(
        "    KWOK:       {} nodes; stages {}",
        r.kwok_nodes,
        r.kwok_stages
            .iter()
            .map(|(n, d)| format!("{n} (delay {d:.2} s)"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "    time-to-resume {} (client {}), {}; the model: {} simulated, floor {:.2} s; in place {}: {}; load {} → {}; set-up {:.1} s",
        if t.resumed {
            secs(t.time_to_resume_s)
        } else {
            "not resumed".into()
        },
        secs(t.client_time_to_resume_s),
        match (t.time_to_resume_s, r.model_recreate_s) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}× the model's", a / b),
            _ => "no model figure to compare".into(),
        },
        secs(r.model_recreate_s),
        r.model_floor_s,
        secs(r.in_place_s),
        r.ratio_to_in_place
            .map_or_else(|| "no ratio".into(), |x| format!("{x:.1}×")),
        r.load.0.as_deref().unwrap_or("?"),
        r.load.1.as_deref().unwrap_or("?"),
        r.setup_seconds
    );
    let w = &t.writes;
    println!(
        "    pods created by: {}; bound by: {}; replaced {}",
        by_verb(&w.created_by),
        by_verb(&t.bound_by),
        t.pods_replaced
    );
    if let Some((a, b)) = w.creates_s {
        println!(
            "    creates {a:.2} s → {b:.2} s after the fault{}; deletes {}; the last pod bound {}",
            create_rate(w).map_or_else(String::new, |x| format!(" ({x:.1} pods/s)")),
            w.deletes_s.map_or_else(
                || "-".into(),
                |(a, b)| format!(
                    "{a:.2} s → {b:.2} s{}",
                    w.delete_collection_s
                        .iter()
                        .map(|d| format!(" (one deletecollection, {d:.2} s in the server)"))
                        .collect::<String>()
                )
            ),
            secs(t.last_bound_s)
        );
    }
    println!("    writes from the fault on, by writer (seconds after the fault):");
    let mut spans: Vec<_> = w.by_writer.iter().collect();
    spans.sort_by(|a, b| a.1.first_s.total_cmp(&b.1.first_s));
    for (k, s) in spans {
        println!("      {k}: {s}");
    }
    for n in &r.notes {
        println!("    note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_are_the_build_script_s_pins() {
        // Whatever they are, each is a version, read from its go.mod.
        for v in components().split("; ") {
            assert!(v.contains(" v"), "{v}");
        }
        assert!(pinned("volcano", "volcano.sh/volcano").starts_with('v'));
        assert_eq!(pinned("volcano", "no.such/module"), "?");
    }

    #[test]
    fn kwok_pods_cost_a_fresh_start_and_a_stop() {
        let c = PodCosts::modelled();
        let shape = PodShape {
            regular_inits: 1,
            sidecars: 1,
            containers: 1,
            probed: true,
        };
        let t = pod_times(&c, &shape);
        // sandbox 0.45 + 3 starts of 0.22 + probe 0.71; stop 2.64
        assert!((t.ready.as_secs_f64() - 1.82).abs() < 1e-9, "{t:?}");
        assert_eq!(t.stop, c.stop);
    }
}
