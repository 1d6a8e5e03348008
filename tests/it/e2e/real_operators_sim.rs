//! `rebound sim --scenario resume --real-operators`, small, through the
//! library call the command makes for each kind
//! (`rebound_sim::bench::resume::measure_on_real_operators`): one control
//! plane of its own with kube-scheduler, the real job operators and KWOK,
//! and a wired job of every kind recreated by rebound in turn. Each job's
//! new pods must come from its real operator (the creator's user agent in
//! the audit log), be bound by the real scheduler (kube-scheduler, or
//! vc-scheduler for Volcano) and be back Running and Ready, with a
//! time-to-resume no shorter than the model's floor. The audit log, kept
//! for the test, is read here too.
//!
//! The Job-backed kinds run 2 pods: the real Job controller counts every
//! pod rebound deletes from a batch Job as failed and waits 10 s × 2^(n−1)
//! before it creates replacements (8 pods would wait its 10-minute cap); 2
//! pods show the doubling in 20 s. (A JobSet's and a TrainJob's child Job
//! is deleted before its pods, so they wait no backoff.)
//!
//! Skips as the other real-server tests do: a printed reason, or a
//! failure under `REBOUND_REQUIRE_REAL_SERVER=1`.

use std::collections::BTreeMap;
use std::path::Path;

use rebound_sim::bench::SimArgs;
use rebound_sim::bench::resume::{JobKind, measure_on_real_operators};
use rebound_sim::components::{self, Set};
use rebound_sim::envtest::{real_server_required, resolve_assets, resolve_scheduler};

/// Why the real components are not all here, if they are not.
fn missing() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = resolve_assets(root)
        .map(|_| ())
        .and_then(|()| resolve_scheduler(root).map(|_| ()))
        .map_err(|e| e.to_string());
    let bins = [
        (Set::Operators, "kwok"),
        (Set::Operators, "jobset"),
        (Set::Operators, "trainer-controller-manager"),
        (Set::Operators, "helm"),
        (Set::Volcano, "vc-controller-manager"),
        (Set::Volcano, "vc-scheduler"),
        (Set::Volcano, "vc-webhook-manager"),
        (Set::TrainingOperator, "training-operator.v1"),
    ];
    found
        .and_then(|()| {
            bins.iter().try_for_each(|(set, name)| {
                components::bin(root, *set, name)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
        .err()
}

/// The user agent up to its first `/`.
fn agent(e: &serde_json::Value) -> &str {
    let ua = e["userAgent"].as_str().unwrap_or("");
    ua.split('/').next().unwrap_or(ua)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_recreated_by_its_real_operator_on_kwok_nodes() {
    let _watchdog = crate::watchdog::start();
    let test = module_path!();
    if let Some(why) = missing() {
        if real_server_required() {
            panic!(
                "{test}: no real components: {why} ({} is set)",
                rebound_sim::envtest::REQUIRE_ENV
            );
        }
        eprintln!("SKIPPED on the real server: {test}: {why}");
        return;
    }
    let audit = std::env::temp_dir().join(format!(
        "rebound-real-operators-sim-{}.audit.log",
        std::process::id()
    ));
    let audit_arg = audit.to_string_lossy().to_string();
    let args = SimArgs::from_flags(&[
        "--scenario",
        "resume",
        "--real-operators",
        "--in-process",
        "--keep-audit-log",
        &audit_arg,
    ])
    .expect("flags");
    // (kind, pods, the pods' creator, their scheduler)
    let jobs = [
        (JobKind::Volcano, 8, "vc-controller-manager", "vc-scheduler"),
        (
            JobKind::PyTorchJob,
            8,
            "training-operator.v1",
            "kube-scheduler",
        ),
        (JobKind::Job, 2, "kube-controller-manager", "kube-scheduler"),
        (
            JobKind::JobSet,
            2,
            "kube-controller-manager",
            "kube-scheduler",
        ),
        (
            JobKind::TrainJob,
            2,
            "kube-controller-manager",
            "kube-scheduler",
        ),
    ];
    let kinds: Vec<(JobKind, usize)> = jobs.iter().map(|(k, n, _, _)| (*k, *n)).collect();
    let t = std::time::Instant::now();
    let reports = measure_on_real_operators(&args, &kinds)
        .await
        .expect("the real-operator recreates");
    eprintln!("{test}: the run took {:?}", t.elapsed());
    assert_eq!(reports.len(), jobs.len());
    for ((kind, pods, creator, scheduler), r) in jobs.iter().zip(&reports) {
        let t = &r.recreate;
        assert!(t.resumed, "{kind:?}: {t:?}");
        assert_eq!(t.tier_recorded.as_deref(), Some("Recreate"), "{kind:?}");
        let ttr = t.time_to_resume_s.expect("a server-clock time");
        assert!(
            ttr.is_finite() && ttr > 0.0 && t.client_time_to_resume_s.is_some(),
            "{kind:?}: {t:?}"
        );
        // The model's least is not above what the real components took.
        assert!(
            ttr >= r.model_floor_s,
            "{kind:?}: {ttr:.2} s on the real operators, under the model's floor {:.2} s",
            r.model_floor_s
        );
        assert_eq!(t.pods_replaced, *pods, "{kind:?}: {t:?}");
        assert_eq!(
            t.writes.created_by,
            BTreeMap::from([((*creator).to_owned(), *pods)]),
            "{kind:?}: every new pod from its real operator"
        );
        // The job's pods bound twice (created, recreated), all by the real
        // scheduler.
        assert_eq!(
            t.bound_by,
            BTreeMap::from([((*scheduler).to_owned(), 2 * pods)]),
            "{kind:?}"
        );
        if *kind == JobKind::Job {
            // The real Job controller's failure backoff: 2 deleted pods,
            // 20 s (its failure time rounded down to the second). A
            // JobSet's and a TrainJob's child Job is deleted before its
            // pods (rebound restarts them as JobSet does): no backoff.
            let (first_create, _) = t.writes.creates_s.expect("creates");
            assert!(first_create >= 19.0, "{kind:?}: {:?}", t.writes);
        }
    }

    // The audit log, read here on its own: every pod of the run created by
    // a real operator, bound by a real scheduler.
    // `--keep-audit-log X.log` keeps the real operators' control plane's
    // as `X.real-operators.log` (and KWOK's log beside it).
    let kept = audit.with_extension("real-operators.log");
    let events = super::audit_events(&kept);
    let _ = std::fs::remove_file(&kept);
    for log in [
        "kwok",
        "training-operator",
        "jobset",
        "trainer",
        "vc-webhook-manager",
        "vc-controller-manager",
        "vc-scheduler",
    ] {
        let _ = std::fs::remove_file(audit.with_extension(format!("real-operators.{log}.log")));
    }
    let ok = |e: &&serde_json::Value| {
        e["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| c < 300)
    };
    let in_run = |e: &&serde_json::Value| {
        e["objectRef"]["resource"] == "pods"
            && e["objectRef"]["namespace"]
                .as_str()
                .is_some_and(|n| n.starts_with("sim"))
    };
    let mut creators: BTreeMap<&str, usize> = BTreeMap::new();
    let mut binders: BTreeMap<&str, usize> = BTreeMap::new();
    for e in events.iter().filter(ok).filter(in_run) {
        match (e["verb"].as_str(), e["objectRef"]["subresource"].as_str()) {
            (Some("create"), None) => *creators.entry(agent(e)).or_default() += 1,
            (Some("create"), Some("binding")) => *binders.entry(agent(e)).or_default() += 1,
            _ => {}
        }
    }
    let total: usize = jobs.iter().map(|(_, n, _, _)| 2 * n).sum();
    assert_eq!(creators.values().sum::<usize>(), total, "{creators:?}");
    assert!(
        creators.keys().all(|c| [
            "vc-controller-manager",
            "training-operator.v1",
            "kube-controller-manager"
        ]
        .contains(c)),
        "{creators:?}"
    );
    assert_eq!(binders.values().sum::<usize>(), total, "{binders:?}");
    assert!(
        binders
            .keys()
            .all(|b| ["vc-scheduler", "kube-scheduler"].contains(b)),
        "{binders:?}"
    );
}
