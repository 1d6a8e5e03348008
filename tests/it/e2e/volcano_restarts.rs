//! rebound never makes Volcano restart a job twice (issue 32 item 6): its
//! record is written before the Command, and nothing of rebound's writes
//! to the job while Volcano carries the restart out (a write there made
//! Volcano's closing status write conflict, and Volcano ran the whole
//! restart again: 512 pods made for 256). Each restart makes the job's
//! pods once; Volcano's own `maxRetry` is kept (two restarts of 3, the
//! third skipped with RetryLimit, the job not failed). On the real server
//! this is the real Volcano controller, webhooks and vc-scheduler.

use super::operator_restarts::NO_COOLDOWN;
use super::*;
use futures::StreamExt;
use kube::runtime::watcher;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

const PODS: usize = 16;
const SEL: &str = "volcano.sh/job-name=vc";

async fn volcano_makes_each_restart_once_and_keeps_its_retry_limit(server: Server) {
    let (bed, ctl) = bed_with(server, PODS, NO_COOLDOWN, None).await;
    let ml = bed.ns("ml");
    // Every pod of the job ever made, by uid, from a watch of our own.
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let watch = {
        let seen = seen.clone();
        let pods: Api<Pod> = Api::namespaced(bed.client(), &ml);
        tokio::spawn(async move {
            let mut s = watcher(pods, watcher::Config::default().labels(SEL)).boxed();
            while let Some(ev) = s.next().await {
                let objs = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    _ => vec![],
                };
                for p in objs {
                    if let (Some(uid), Ok(mut s)) = (p.metadata.uid, seen.lock()) {
                        s.insert(uid);
                    }
                }
            }
        })
    };
    bed.cluster
        .create_volcano_job(&ml, "vc", PODS as u32, &[OPT_IN])
        .await
        .expect("create");
    let mut pods = wait("vc running", 3 * T, || async {
        let p = running(&bed, &ml, SEL).await;
        (p.len() >= PODS).then_some(p)
    })
    .await;
    let mut windows = Vec::new();
    for n in 1..=2u64 {
        let before: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let victim = pods[0].metadata.name.clone().expect("name");
        let container = pods[0].spec.as_ref().expect("spec").containers[0]
            .name
            .clone();
        let failed_at = std::time::SystemTime::now();
        bed.cluster
            .fail_container(&ml, &victim, &container, 1, "Error")
            .await
            .expect("fail");
        pods = wait(
            &format!("restart {n}: every pod new and running"),
            3 * T,
            || async {
                let p = running(&bed, &ml, SEL).await;
                let fresh = p
                    .iter()
                    .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| !before.contains(u)))
                    .count();
                (fresh >= PODS).then_some(p)
            },
        )
        .await;
        windows.push((failed_at, std::time::SystemTime::now()));
        wait(&format!("restart {n} recorded"), T, || async {
            (volcano_restart_count(&bed, &ml).await == n).then_some(())
        })
        .await;
    }
    // The third would exhaust maxRetry 3: skipped, said, the job alive.
    let victim = pods[0].metadata.name.clone().expect("name");
    let container = pods[0].spec.as_ref().expect("spec").containers[0]
        .name
        .clone();
    bed.cluster
        .fail_container(&ml, &victim, &container, 1, "Error")
        .await
        .expect("fail");
    wait("the RetryLimit decision said", T, || async {
        events_with_reason(&bed, &ml, "RestartSkipped")
            .await
            .into_iter()
            .any(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.starts_with("RetryLimit"))
            })
            .then_some(())
    })
    .await;
    assert_eq!(volcano_restart_count(&bed, &ml).await, 2);
    let made = seen.lock().map(|s| s.len()).unwrap_or(0);
    assert_eq!(made, 3 * PODS, "each restart made the job's pods once");
    // rebound's writes to the job: each record before its Command, none
    // while Volcano restarts it.
    let log: Vec<RequestRecord> = bed
        .requests()
        .into_iter()
        .filter(by_controller)
        .filter(|r| r.status < 300 && r.namespace.as_deref() == Some(ml.as_str()))
        .collect();
    let commands: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "commands")
        .collect();
    assert_eq!(commands.len(), 2, "one Command a restart");
    let job_writes: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| {
            r.resource == "jobs"
                && r.name.as_deref() == Some("vc")
                && matches!(r.verb, "patch" | "update")
        })
        .collect();
    for (c, (from, to)) in commands.iter().zip(&windows) {
        assert!(
            job_writes
                .iter()
                .any(|w| w.wall >= *from && w.wall <= c.wall),
            "a record written before the Command"
        );
        let during: Vec<_> = job_writes
            .iter()
            .filter(|w| w.wall > c.wall && w.wall <= *to)
            .map(|w| format!("{} {}", w.verb, w.path))
            .collect();
        assert!(
            during.is_empty(),
            "rebound wrote the job during Volcano's restart: {during:?}"
        );
    }
    watch.abort();
    ctl.shutdown().await;
}

async fn volcano_restart_count(bed: &Testbed, ns: &str) -> u64 {
    Api::<DynamicObject>::namespaced_with(
        bed.client(),
        ns,
        &rebound_sim::actors::volcano::job_resource(),
    )
    .get("vc")
    .await
    .ok()
    .and_then(|j| {
        j.metadata
            .annotations
            .unwrap_or_default()
            .get("rebound.dev/restart-count")
            .and_then(|v| v.parse().ok())
    })
    .unwrap_or(0)
}

e2e!(volcano_makes_each_restart_once_and_keeps_its_retry_limit);
