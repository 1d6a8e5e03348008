//! `rebound sim --scenario resume --real-node --real-scheduler`, small,
//! through the library call the command makes
//! (`rebound_sim::bench::resume::measure`): a control plane of its own
//! from the assets with kube-scheduler, a real node beside it (kubelet
//! v1.36.2, containerd, runc), one wired Volcano Job of 2 pods on the
//! simulated nodes and 2 on the real node, the in-place tier only. The
//! report must have the real kubelet's own figure, its pods must be the
//! same pods restarted in place, and every pod must have been bound by the
//! real kube-scheduler. What the report says is checked against the API
//! server's audit log, kept for the test: the bindings' user agent and the
//! real pods' status writes by the kubelet.
//!
//! Skips as the real-node tests do: a printed reason, or a failure under
//! `REBOUND_REQUIRE_REAL_SERVER=1`.

use rebound_sim::bench::SimArgs;
use rebound_sim::bench::resume::{self, ResumeReport};
use rebound_sim::envtest::{
    node::missing_host_pieces, real_server_required, resolve_assets, resolve_node_assets,
    resolve_scheduler,
};
use std::path::{Path, PathBuf};

/// The assets directory with the control plane, the kubelet, `pause` and
/// kube-scheduler, or `None` after printing why there is none (a failure
/// under `REBOUND_REQUIRE_REAL_SERVER=1`).
fn assets_or_skip(test: &str) -> Option<PathBuf> {
    if !super::real_server_or_skip(test) {
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = match missing_host_pieces() {
        Some(why) => Err(why),
        None => resolve_assets(root)
            .and_then(|a| {
                resolve_node_assets(root)?;
                resolve_scheduler(root)?;
                Ok(a.dir)
            })
            .map_err(|e| e.to_string()),
    };
    match found {
        Ok(dir) => Some(dir),
        Err(why) if real_server_required() => panic!(
            "{test}: no real node: {why} ({} is set)",
            rebound_sim::envtest::REQUIRE_ENV
        ),
        Err(why) => {
            eprintln!("SKIPPED on the real node: {test}: {why}");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_resume_measures_real_kubelet_pods_placed_by_the_real_scheduler() {
    let _watchdog = crate::watchdog::start();
    let test = module_path!();
    let Some(dir) = assets_or_skip(test) else {
        return;
    };
    let audit = std::env::temp_dir().join(format!(
        "rebound-real-node-sim-{}.audit.log",
        std::process::id()
    ));
    let dir = dir.to_string_lossy().to_string();
    let audit_arg = audit.to_string_lossy().to_string();
    let args = SimArgs::from_flags(&[
        "--scenario",
        "resume",
        "--assets",
        &dir,
        "--real-node",
        "--real-node-pods",
        "2",
        "--real-scheduler",
        "--agent-binary",
        env!("CARGO_BIN_EXE_rebound"),
        "--nodes",
        "4",
        "--job-size",
        "2",
        "--tiers",
        "InPlace",
        "--in-process",
        "--keep-audit-log",
        &audit_arg,
    ])
    .expect("flags");
    let t = std::time::Instant::now();
    let r: ResumeReport = resume::measure(&args).await.expect("sim resume");
    eprintln!("{test}: the run took {:?}", t.elapsed());
    assert!(r.real_node.is_some(), "{r:?}");
    assert!(r.scheduler.contains("kube-scheduler"), "{}", r.scheduler);
    let [ip] = &r.tiers[..] else {
        panic!("one tier: {:?}", r.tiers)
    };
    assert_eq!(ip.tier, "InPlace");
    assert!(ip.resumed, "{ip:?}");
    assert_eq!(ip.pods_replaced, 0, "{ip:?}");
    let real = ip
        .real_kubelet
        .as_ref()
        .expect("the real kubelet's figures");
    for (what, v) in [
        ("real kubelet, server clock", real.time_to_resume_s),
        ("real kubelet, client clock", real.client_time_to_resume_s),
        (
            "simulated pods, server clock",
            real.simulated_time_to_resume_s,
        ),
    ] {
        assert!(
            v.is_some_and(|s| s.is_finite() && s > 0.0),
            "{what}: {v:?} in {real:?}"
        );
    }
    // The same pods, each restarted in place once: agent and worker.
    assert_eq!(real.pods.len(), 2, "{real:?}");
    for p in &real.pods {
        assert!(p.same_pod, "{p:?}");
        assert_eq!(p.agent_restarts.1, p.agent_restarts.0 + 1, "{p:?}");
        assert_eq!(p.worker_restarts.1, p.worker_restarts.0 + 1, "{p:?}");
    }
    // Every pod of the job (2 simulated, 2 real) bound by kube-scheduler.
    assert_eq!(
        ip.bound_by
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("kube-scheduler", 4)],
        "{ip:?}"
    );

    // The audit log, read here on its own: who bound the job's pods, and
    // who wrote the real pods' status.
    let events = super::audit_events(&audit);
    let _ = std::fs::remove_file(&audit);
    let of_job = |e: &serde_json::Value| {
        e["objectRef"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(&ip.job))
    };
    let binders: Vec<&str> = events
        .iter()
        .filter(|e| e["objectRef"]["subresource"] == "binding" && of_job(e))
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .map(|e| e["userAgent"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(binders.len(), 4, "{binders:?}");
    assert!(
        binders.iter().all(|ua| ua.starts_with("kube-scheduler/")),
        "{binders:?}"
    );
    for p in &real.pods {
        let by_kubelet = events.iter().any(|e| {
            e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["name"] == p.name.as_str()
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|ua| ua.starts_with("kubelet/"))
        });
        assert!(
            by_kubelet,
            "{}: no status write by the real kubelet",
            p.name
        );
    }
}
