//! What `rebound sim --scenario resume` prints (text, or `-o json`): one
//! row per recovery tier, and the goals of issue #14 computed from them.

use serde::Serialize;
use std::collections::BTreeMap;

use super::floor::{Floor, PodShape};

/// One tier's recovery, measured.
#[derive(Debug, Clone, Serialize)]
pub struct TierResult {
    /// `InPlace`, `ReplaceFaulty` or `Recreate`: the policy's only tier.
    pub tier: String,
    /// The tier the controller recorded on the job (its restart history);
    /// `null` if it recorded none.
    pub tier_recorded: Option<String>,
    /// The job measured (a fresh one per tier).
    pub job: String,
    /// The fault injected.
    pub fault: String,
    /// Whether every pod was Running and Ready in the new generation
    /// before the scenario gave up waiting.
    pub resumed: bool,
    /// Server clock: the fault's status write committed → the status write
    /// of the last pod to be back (the last one the server received before
    /// this process saw the job resumed). `null` without a server log.
    pub time_to_resume_s: Option<f64>,
    /// Server clock, in-place tiers: the fault's write committed → rebound's
    /// write lifting the barrier committed (every pod was back at the
    /// barrier); the rest of the time-to-resume is the workers starting.
    pub barrier_released_s: Option<f64>,
    /// Client clock: the injector's write answered → the watch of this
    /// process showing every pod back.
    pub client_time_to_resume_s: Option<f64>,
    /// The pod that was back last.
    pub last_pod: Option<String>,
    /// Every write by rebound (user agent `rebound-controller/`) from the
    /// fault until its activity settled after the resume.
    pub rebound_writes: usize,
    /// Of those, the writes that carry out the recovery: to the job, its
    /// pods and Volcano Commands (not Events, not rebound's own objects,
    /// not nodes).
    pub rebound_recovery_writes: usize,
    /// rebound's writes by verb and resource.
    pub rebound_writes_by_verb: BTreeMap<String, usize>,
    /// Every write the API server answered in the same window, node Leases
    /// excepted (2,000 simulated kubelets renew them every 10 s, a real
    /// server's audit policy here leaves them out). `null` without a log.
    pub total_writes: Option<usize>,
    /// Those writes by `verb resource[/subresource]`: where the simulated
    /// cluster's work went (pod status patches of the kubelets, the job
    /// operator's status writes, ...).
    pub total_writes_by_verb: BTreeMap<String, usize>,
    /// Pods of the job before the fault that are gone (deleted and
    /// replaced by new pods).
    pub pods_replaced: usize,
    /// Their names.
    pub replaced_pods: Vec<String>,
    /// ReplaceFaulty: the node made faulty, and the job's pods on it
    /// before the fault.
    pub faulty_node: Option<String>,
    /// The job's pods on the faulty node before the fault.
    pub faulty_node_pods: Vec<String>,
    /// The job's restart generation before and after.
    pub generation: (u64, u64),
    /// Watch events the API server sent for objects of the job's kind in
    /// the same window, to every watcher (the agents of the job, rebound,
    /// the job's operator): the fan-out of the job's writes. `null` on a
    /// server that does not count them (only the embedded one does).
    pub job_watch_events: Option<u64>,
    /// The least this tier can take under the modelled costs and limits,
    /// in its control-plane and per-pod parts (`resume::floor`).
    pub floor: Floor,
    /// Server clock: the fault's write committed → the last pod of the new
    /// generation bound (the control plane's part of a recreate; `null`
    /// when no pod was bound, as in place).
    pub last_bound_s: Option<f64>,
    /// The pods of the tier's job bound (`pods/binding`, from its creation
    /// to the end of the recovery), by the binder's user agent up to its
    /// first `/`: which scheduler placed them. Empty without a server log
    /// or when every pod was bound by its template.
    pub bound_by: BTreeMap<String, usize>,
    /// Who wrote what from the fault on: the new pods by their creator,
    /// the span of the creates and deletes (server clock).
    pub writes: super::writes::RecoveryWrites,
    /// With `--real-node`: the real kubelet's pods of the job, measured
    /// apart from the simulated ones.
    pub real_kubelet: Option<super::real::RealTier>,
}

impl TierResult {
    /// Measured time-to-resume over the floor, where both exist.
    pub fn over_floor(&self) -> Option<f64> {
        let f = self.floor.total_s();
        self.time_to_resume_s
            .filter(|_| self.resumed && f > 0.0)
            .map(|t| t / f)
    }
}

/// A goal of issue #14, checked on the figures.
#[derive(Debug, Clone, Serialize)]
pub struct GoalCheck {
    /// What is checked.
    pub goal: String,
    /// Whether the figures meet it.
    pub pass: bool,
    /// The figures it was decided on.
    pub detail: String,
}

/// The report of the `resume` scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ResumeReport {
    /// `resume`.
    pub scenario: String,
    /// Simulated nodes.
    pub nodes: usize,
    /// Pods of the job.
    pub job_size: usize,
    /// The job's kind and how it is wired.
    pub job_kind: String,
    /// Which component creates the job's pods, under which limits.
    pub pods_from: String,
    /// Which scheduler places them.
    pub scheduler: String,
    /// With `--real-node`: the real node and what runs on it.
    pub real_node: Option<String>,
    /// `--operator-limits`.
    pub operator_limits: String,
    /// `--app-start`: the application's own start, seconds, added to every
    /// tier alike.
    pub app_start_s: f64,
    /// What a pod of the job runs (the floors are computed from it).
    pub pod_shape: PodShape,
    /// The API server.
    pub server: String,
    /// The server-side clock, `null` without one.
    pub server_timing: Option<String>,
    /// `--pod-costs`.
    pub pod_costs: String,
    /// Seconds until the controller was ready.
    pub setup_seconds: f64,
    /// One row per tier, in the order run.
    pub tiers: Vec<TierResult>,
    /// The goals, computed.
    pub goals: Vec<GoalCheck>,
    /// Remarks on the run.
    pub notes: Vec<String>,
    /// With `--real-operators`: the Recreate tier on the real components.
    pub real_operators: Option<super::RealOperatorsReport>,
}

fn tier<'a>(tiers: &'a [TierResult], name: &str) -> Option<&'a TierResult> {
    tiers.iter().find(|t| t.tier == name)
}

/// The figure time-to-resume is compared on: the server clock where both
/// have it, else the client clock.
fn ttr(t: &TierResult, server: bool) -> Option<f64> {
    if server {
        t.time_to_resume_s
    } else {
        t.client_time_to_resume_s
    }
    .filter(|_| t.resumed)
}

/// Issue #14's goals on these figures: in place at least 10× shorter than
/// recreate; ReplaceFaulty replaced exactly the faulty node's pods; at most
/// 2 recovery writes by rebound for an in-place restart of the whole job.
pub fn goals(tiers: &[TierResult]) -> Vec<GoalCheck> {
    let mut out = Vec::new();
    let (ip, rf, rc) = (
        tier(tiers, "InPlace"),
        tier(tiers, "ReplaceFaulty"),
        tier(tiers, "Recreate"),
    );
    let ten = match (ip, rc) {
        (Some(a), Some(b)) => {
            let server = a.time_to_resume_s.is_some() && b.time_to_resume_s.is_some();
            match (ttr(a, server), ttr(b, server)) {
                (Some(x), Some(y)) if x > 0.0 => GoalCheck {
                    goal: "in-place time-to-resume ≥10× shorter than recreate".into(),
                    pass: y / x >= 10.0,
                    detail: format!(
                        "{x:.2} s in place, {y:.2} s recreate: {:.1}× ({} clock); the floors allow at most {:.1}× ({:.2} s / {:.2} s)",
                        y / x,
                        if server { "server" } else { "client" },
                        b.floor.total_s() / a.floor.total_s().max(f64::EPSILON),
                        b.floor.total_s(),
                        a.floor.total_s(),
                    ),
                },
                _ => GoalCheck {
                    goal: "in-place time-to-resume ≥10× shorter than recreate".into(),
                    pass: false,
                    detail: "a tier did not resume: no figure to compare".into(),
                },
            }
        }
        _ => GoalCheck {
            goal: "in-place time-to-resume ≥10× shorter than recreate".into(),
            pass: false,
            detail: "InPlace or Recreate not run".into(),
        },
    };
    out.push(ten);
    if let Some(t) = ip {
        let goal = "in-place time-to-resume within 1.15× its floor".to_owned();
        out.push(match t.over_floor() {
            Some(r) => GoalCheck {
                goal,
                pass: r <= 1.15,
                detail: format!(
                    "{:.2} s measured, floor {:.2} s: {r:.2}×",
                    t.time_to_resume_s.unwrap_or_default(),
                    t.floor.total_s()
                ),
            },
            None => GoalCheck {
                goal,
                pass: false,
                detail: "no server-clock time or no floor".into(),
            },
        });
    }
    for t in tiers {
        if let Some(r) = t.over_floor() {
            out.push(GoalCheck {
                goal: format!("{}: floor ≤ measured", t.tier),
                pass: r >= 1.0,
                detail: format!("{r:.2}× its floor"),
            });
        }
    }
    out.push(match rf {
        Some(t) => {
            let mut want = t.faulty_node_pods.clone();
            let mut got = t.replaced_pods.clone();
            want.sort();
            got.sort();
            GoalCheck {
                goal: "ReplaceFaulty replaced only the pods of the faulty node".into(),
                pass: t.resumed && !want.is_empty() && want == got,
                detail: format!(
                    "replaced {} pod(s) [{}]; on the faulty node {}: {} [{}]",
                    got.len(),
                    got.join(", "),
                    t.faulty_node.as_deref().unwrap_or("-"),
                    want.len(),
                    want.join(", ")
                ),
            }
        }
        None => GoalCheck {
            goal: "ReplaceFaulty replaced only the pods of the faulty node".into(),
            pass: false,
            detail: "ReplaceFaulty not run".into(),
        },
    });
    out.push(match ip {
        Some(t) => GoalCheck {
            goal: "rebound wrote ≤2 requests for the in-place recovery of the whole job".into(),
            pass: t.resumed && t.rebound_recovery_writes <= 2 && t.pods_replaced == 0,
            detail: format!(
                "{} recovery write(s) (job, pods, Commands), {} pod(s) replaced; all of rebound's writes: {} ({})",
                t.rebound_recovery_writes,
                t.pods_replaced,
                t.rebound_writes,
                by_verb(&t.rebound_writes_by_verb)
            ),
        },
        None => GoalCheck {
            goal: "rebound wrote ≤2 requests for the in-place recovery of the whole job".into(),
            pass: false,
            detail: "InPlace not run".into(),
        },
    });
    out
}

pub(super) fn by_verb(m: &BTreeMap<String, usize>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |s| format!("{s:.2} s"))
}

/// The text form.
pub fn print_text(r: &ResumeReport) {
    println!(
        "rebound sim: scenario resume on {} nodes, a fresh job of {} pods per tier (setup {:.1}s)",
        r.nodes, r.job_size, r.setup_seconds
    );
    println!("  API server:   {}", r.server);
    println!("  job:          {}", r.job_kind);
    println!("  pods from:    {}", r.pods_from);
    println!("  scheduler:    {}", r.scheduler);
    if let Some(n) = &r.real_node {
        println!("  real node:    {n}");
    }
    println!(
        "  pod:          {} init container(s) run to completion, {} sidecar(s), {} container(s){}",
        r.pod_shape.regular_inits,
        r.pod_shape.sidecars,
        r.pod_shape.containers,
        if r.pod_shape.probed {
            ", Ready after its probe"
        } else {
            ""
        }
    );
    println!("  pod costs:    {}", r.pod_costs);
    println!("  op. limits:   {}", r.operator_limits);
    println!(
        "  time-to-resume: fault committed → every pod Running and Ready in the new generation ({}; client clock beside it)",
        r.server_timing.as_deref().unwrap_or("no server clock")
    );
    let real = r.tiers.iter().any(|t| t.real_kubelet.is_some());
    println!(
        "  {:<14} {:>12} {:>9} {:>17} {:>12} {:>9} {:>9} {:>8} {:>9}{}",
        "tier",
        "resume",
        "floor",
        "(ctl + pod)",
        "(client)",
        "rebound",
        "recovery",
        "total",
        "replaced",
        if real {
            format!(" {:>12} {:>12}", "simulated", "real kubelet")
        } else {
            String::new()
        }
    );
    for t in &r.tiers {
        let total = t.total_writes.map_or_else(|| "-".into(), |n| n.to_string());
        let real_cols = t.real_kubelet.as_ref().map_or_else(String::new, |k| {
            format!(
                " {:>12} {:>12}",
                secs(k.simulated_time_to_resume_s),
                secs(k.time_to_resume_s)
            )
        });
        println!(
            "  {:<14} {:>12} {:>9} {:>17} {:>12} {:>9} {:>9} {:>8} {:>9}{real_cols}{}",
            t.tier,
            if t.resumed {
                secs(t.time_to_resume_s)
            } else {
                "not resumed".into()
            },
            format!("{:.2} s", t.floor.total_s()),
            format!(
                "({:.2} + {:.2})",
                t.floor.control_plane_s, t.floor.per_pod_s
            ),
            secs(t.client_time_to_resume_s),
            t.rebound_writes,
            t.rebound_recovery_writes,
            total,
            t.pods_replaced,
            match &t.tier_recorded {
                Some(x) if x != &t.tier => format!("   (controller recorded {x})"),
                None => "   (no restart recorded)".into(),
                _ => String::new(),
            }
        );
    }
    if real {
        println!(
            "  (simulated = the same span for the pods of the simulated kubelets alone, real kubelet = for the pods on the real node alone; resume = the whole job)"
        );
    }
    println!(
        "  (floor = the least the modelled costs and limits allow, control plane + the pod's own start; rebound = every write by rebound-controller/; recovery = its writes to the job, its pods and Commands; total = every write the server answered meanwhile, node Leases excepted)"
    );
    for t in &r.tiers {
        println!(
            "  {}: {}; generation {} → {}; rebound's writes: {}",
            t.tier,
            t.fault,
            t.generation.0,
            t.generation.1,
            by_verb(&t.rebound_writes_by_verb)
        );
        if !t.total_writes_by_verb.is_empty() {
            println!(
                "    the server's writes meanwhile: {}",
                by_verb(&t.total_writes_by_verb)
            );
        }
        if let Some(n) = t.job_watch_events {
            println!(
                "    watch events the server sent for jobs of this kind meanwhile (agents, rebound, the operator): {n}"
            );
        }
        if !t.bound_by.is_empty() {
            println!("    pods bound by: {}", by_verb(&t.bound_by));
        }
        if let Some(k) = &t.real_kubelet {
            println!(
                "    real kubelet on {}: fault → its last pod Running and Ready {} (client {}); simulated pods {} (client {})",
                k.node,
                secs(k.time_to_resume_s),
                secs(k.client_time_to_resume_s),
                secs(k.simulated_time_to_resume_s),
                secs(k.simulated_client_time_to_resume_s)
            );
            for p in &k.pods {
                println!(
                    "      {}: {}, agent restarts {} → {}, worker restarts {} → {}",
                    p.name,
                    if p.same_pod {
                        "same pod (restarted in place)"
                    } else {
                        "replaced by a new pod"
                    },
                    p.agent_restarts.0,
                    p.agent_restarts.1,
                    p.worker_restarts.0,
                    p.worker_restarts.1
                );
            }
        }
        if let Some(b) = t.barrier_released_s {
            println!(
                "    barrier released {b:.2} s after the fault (every pod back at the barrier)"
            );
        }
        if let (Some(b), Some(ttr)) = (t.last_bound_s, t.time_to_resume_s) {
            println!(
                "    control plane: the last new pod bound {b:.2} s after the fault (floor {:.2} s); per pod: {:.2} s more to Running and Ready (floor {:.2} s)",
                t.floor.control_plane_s,
                ttr - b,
                t.floor.per_pod_s
            );
        }
        if let Some(ttr) = t
            .time_to_resume_s
            .filter(|_| t.resumed && r.app_start_s > 0.0)
        {
            println!(
                "    with the application's own start ({:.2} s, --app-start): {:.2} s",
                r.app_start_s,
                ttr + r.app_start_s
            );
        }
    }
    if let Some(ro) = &r.real_operators {
        super::real_operators::print_text(ro);
    }
    for g in &r.goals {
        println!(
            "  goal {}: {} ({})",
            if g.pass { "PASS" } else { "FAIL" },
            g.goal,
            g.detail
        );
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
}
