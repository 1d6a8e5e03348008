//! How many heap bytes the controller's caches hold per pod and per node,
//! at the `rebound sim` scale (20,000 pods in 2,500 PyTorchJobs, 2,000
//! nodes): the memory target's main term, measured by counting the
//! allocator's live bytes around building the caches from the embedded
//! cluster's own objects.
//!
//! `cargo run --release --example cache_memory`

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use rebound::controller::core::input::PodSeen;
use rebound::controller::core::pods::Interner;
use rebound::controller::core::store::{NodeInfo, Store as Cache};
use rebound_sim::cluster::{JobOptions, SimCluster, SimConfig, pod_running};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

/// The system allocator with a count of live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const PODS: usize = 20_000;
const NODES: usize = 2_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // One real job on a small embedded cluster: its pods and nodes are the
    // templates, copied with new names (the objects the controller sees).
    let cluster = SimCluster::start(SimConfig {
        nodes: 2,
        gpus_per_pod: 0,
        ..SimConfig::default()
    })
    .await?;
    cluster.api().ensure_namespace("sim")?;
    cluster.bulk_pytorchjobs(
        "sim",
        "job",
        1,
        7,
        &JobOptions::labels(&[("kcover.io/cascading-recovery", "true")]),
    )?;
    let api: Api<Pod> = Api::namespaced(cluster.client(), "sim");
    let pods = loop {
        let l = api.list(&ListParams::default()).await?.items;
        if l.len() == 8 && l.iter().all(pod_running) {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let nodes: Vec<Node> = Api::<Node>::all(cluster.client())
        .list(&ListParams::default())
        .await?
        .items;
    let keys = rebound::controller::core::pods::KeySet::default_only();

    let before = LIVE.load(Ordering::Relaxed);
    let mut cache = Cache::default();
    let mut pool = Interner::default();
    for i in 0..PODS {
        let mut p = pods[i % pods.len()].clone();
        let job = i / pods.len();
        let name = p.metadata.name.clone().unwrap_or_default();
        p.metadata.name = Some(name.replacen("job-0", &format!("job-{job}"), 1));
        p.metadata.uid = Some(format!("{:08x}-0000-4000-8000-{:012x}", i, i));
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some(format!("node-{:04}", i % NODES));
        }
        for l in p.metadata.labels.iter_mut().flatten() {
            if l.1 == "job-0" {
                *l.1 = format!("job-{job}");
            }
        }
        let seen = PodSeen::read(
            &p,
            Duration::from_secs(600),
            &keys,
            &mut pool,
            chrono::Utc::now(),
        );
        cache.upsert_pod(seen.info);
    }
    let pods_bytes = LIVE.load(Ordering::Relaxed) - before;

    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..NODES {
        let mut n = nodes[i % nodes.len()].clone();
        n.metadata.name = Some(format!("node-{i:04}"));
        let info = NodeInfo::from_node(&n, Vec::new());
        cache.nodes.insert(info.name.clone(), info);
    }
    let nodes_bytes = LIVE.load(Ordering::Relaxed) - before;

    println!(
        "pods:  {PODS} in the cache: {:.1} MiB, {} bytes per pod",
        pods_bytes as f64 / 1048576.0,
        pods_bytes / PODS as isize
    );
    println!(
        "nodes: {NODES} in the cache: {:.1} MiB, {} bytes per node",
        nodes_bytes as f64 / 1048576.0,
        nodes_bytes / NODES as isize
    );
    drop(cache);
    cluster.shutdown().await;
    Ok(())
}
