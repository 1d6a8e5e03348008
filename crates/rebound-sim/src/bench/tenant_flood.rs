//! The `tenant-flood` scenario (issue 27): one tenant writes a flood of
//! fault Events naming one node — each with a message of `--flood-kib`
//! KiB and a count of 2^31−1, half kcover Events and half copies of a
//! trusted XID 79 line in `rebound.dev/fault` — while pods of the jobs in
//! another namespace fail, one after every `--flood-events / --faults`
//! Events. What it shows: the other namespace's jobs are restarted as fast
//! as without the flood (the reaction figures are theirs), no node is
//! cordoned, and the controller's memory and step times stay bounded (the
//! report's peak RSS and `rebound_core_step_seconds`).
//!
//! A real API server accepts an Event about a Node only in `default` or
//! `kube-system`, so the tenant's Events name a pod of its own namespace
//! (one that does not exist) and the node as their source host, as any
//! tenant can write them.

use super::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::PostParams;
use std::collections::BTreeMap;

/// The tenant's namespace (per run on a shared cluster).
const TENANT: &str = "flood-tenant";

/// Writers of the flood at once.
const WRITERS: usize = 8;

/// What the flood is.
pub(super) struct Flood {
    events: usize,
    message_bytes: usize,
    faults: usize,
}

impl Flood {
    pub(super) fn new(args: &SimArgs, faults: usize) -> Flood {
        Flood {
            events: args.flood_events,
            message_bytes: args.flood_kib * 1024,
            faults: faults.max(1),
        }
    }

    /// Writes the flood and the other namespace's pod faults between its
    /// batches; returns the pod faults (the reactions measured).
    pub(super) async fn run(
        &self,
        env: &SimEnv,
        jobs: usize,
        workers: u32,
        notes: &mut Vec<String>,
    ) -> anyhow::Result<Vec<Injected>> {
        let bed = &env.bed;
        let tenant = bed.ensure_namespace(TENANT).await?;
        let node = bed
            .cluster
            .node_names()
            .first()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("tenant-flood needs at least one node"))?;
        let message = "x".repeat(self.message_bytes);
        let api: Api<Event> = Api::namespaced(bed.client(), &tenant);
        let per_fault = self.events.div_ceil(self.faults).max(1);
        let started = Instant::now();
        let mut injected = Vec::new();
        let mut written = 0usize;
        let mut refused: BTreeMap<String, usize> = BTreeMap::new();
        for (batch, from) in (0..self.events).step_by(per_fault).enumerate() {
            let to = (from + per_fault).min(self.events);
            let answers: Vec<Result<(), kube::Error>> = futures::stream::iter(from..to)
                .map(|i| {
                    let ev = flood_event(&tenant, &node, &message, i);
                    let api = api.clone();
                    async move { api.create(&PostParams::default(), &ev).await.map(|_| ()) }
                })
                .buffer_unordered(WRITERS)
                .collect()
                .await;
            for a in answers {
                match a {
                    Ok(()) => written += 1,
                    Err(e) => *refused.entry(short(&e)).or_default() += 1,
                }
            }
            if batch < self.faults && batch < jobs {
                injected.push(scenario_faults::pod_exit(env, batch, jobs, workers).await?);
            }
        }
        notes.push(format!(
            "tenant-flood: {written} of {} fault Events written in {:.1}s by {WRITERS} writers into namespace {tenant}, each naming node {node} with a {} KiB message and count {}: half kcover Events, half a copied XID 79 line in rebound.dev/fault; one pod of another namespace's job failed after every {per_fault} Events ({} faults, the reactions above are theirs)",
            self.events,
            started.elapsed().as_secs_f64(),
            self.message_bytes / 1024,
            i32::MAX,
            injected.len(),
        ));
        for (why, n) in refused {
            notes.push(format!(
                "tenant-flood: {n} Events refused by the server: {why}"
            ));
        }
        Ok(injected)
    }
}

/// The server's reason, without the body it may quote.
fn short(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.reason),
        other => other.to_string().chars().take(120).collect(),
    }
}

/// The tenant's `i`th Event: even ones kcover's, odd ones a copied XID 79
/// line of `node`.
fn flood_event(ns: &str, node: &str, message: &str, i: usize) -> Event {
    let mut ev = crate::cluster::kcover_event(ns, &format!("ghost-{i}"), node, i32::MAX, message);
    if !i.is_multiple_of(2) {
        let copied = WireFault {
            source: "NvidiaXid".into(),
            code: "79".into(),
            node: Some(node.into()),
            device: Some("0".into()),
            ..Default::default()
        };
        ev.metadata.annotations = Some(BTreeMap::from([(
            wire::FAULT_ANNOTATION.to_owned(),
            serde_json::to_string(&copied).unwrap_or_default(),
        )]));
    }
    ev
}
