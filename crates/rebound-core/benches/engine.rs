//! Engine throughput: faults classified and decided per second on one core,
//! with every shipped sample loaded and the samples' CEL in play.
//!
//! Run: `cargo bench --bench engine` (prints the median decisions/s of seven
//! runs and each run; the README quotes the figure). Not a pass/fail test:
//! the target (200,000/s) is shown, not asserted.

use chrono::Utc;
use rebound_core::explain::{engine_from, load_paths};
use rebound_core::fault::{Fault, FaultSource};
use rebound_core::policy::{JobInput, NodeInput};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

/// The allocator the `rebound` binary runs with (src/main.rs), so the
/// figure is the product's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let samples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../samples");
    let loaded = load_paths(&[samples]).expect("samples load");
    let (mut engine, _) = engine_from(&loaded, "rebound-system", 2000).expect("samples compile");
    let now = Utc::now();
    let job = rebound_core::explain::parse_job(
        "kind=PyTorchJob,name=llm,namespace=team-a,labels.kcover.io/cascading-recovery=true",
        &[],
        &[],
        now,
    )
    .expect("job");
    let jobs: Vec<JobInput> = vec![job];
    // A realistic mix: XIDs (hardware and app-class), Ascend codes, exits.
    let mix: Vec<(FaultSource, &str, Option<&str>)> = vec![
        (FaultSource::NvidiaXid, "79", None),
        (FaultSource::NvidiaXid, "13", None),
        (FaultSource::NvidiaXid, "48", None),
        (FaultSource::NvidiaXid, "74", None),
        (FaultSource::NvidiaXid, "145", None),
        (FaultSource::AscendNpu, "80E18402", None),
        (FaultSource::AscendNpu, "8C1F8609", None),
        (FaultSource::PodExit, "137", Some("OOMKilled")),
        (FaultSource::PodExit, "1", Some("Error")),
        (FaultSource::PodExit, "143", Some("Error")),
    ];
    let nodes: Vec<NodeInput> = (0..2000)
        .map(|i| NodeInput {
            name: format!("gpu-{i}"),
            // Already cordoned: the breaker is not the thing measured.
            unschedulable: true,
            tainted: true,
            cordoned_by_rebound: None,
        })
        .collect();
    let mut run = |n: usize| {
        let start = Instant::now();
        let mut acted = 0usize;
        for i in 0..n {
            let (src, code, reason) = mix[i % mix.len()];
            let mut f = Fault::new(src, code, now + chrono::Duration::milliseconds(i as i64));
            let node = &nodes[i % nodes.len()];
            f.node = Some(node.name.clone());
            f.device = Some((i % 8).to_string());
            f.reason = reason.map(str::to_string);
            f.namespace = Some("team-a".into());
            f.pod = Some("llm-worker-0".into());
            f.trusted = true;
            let d = engine.decide(f, Some(node), None, &jobs, now);
            acted += d.jobs.iter().filter(|j| j.acts()).count();
            black_box(&d);
        }
        (start.elapsed(), acted)
    };
    run(20_000); // warm up
    // The median of several runs: one run on a shared machine is moved by
    // whatever else ran in that second.
    let n = 400_000;
    let runs = 7;
    let mut rates: Vec<f64> = Vec::with_capacity(runs);
    let mut acted = 0;
    for _ in 0..runs {
        let (elapsed, a) = run(n);
        acted = a;
        rates.push(n as f64 / elapsed.as_secs_f64());
    }
    let mut sorted = rates.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[runs / 2];
    let all: Vec<String> = rates.iter().map(|r| format!("{:.0}", r)).collect();
    println!(
        "engine: {n} faults classified and decided per run on one core, {runs} runs: median {median:.0} decisions/s ({:.2} µs each; runs: {}; {acted} restarts decided per run; {} classifications, {} policies loaded)",
        1e6 / median,
        all.join(", "),
        loaded.classifications.len(),
        loaded.policies.len(),
    );
}
