//! Events fold into a series only when they say the same thing (issue 32
//! item 7): two restarts of a job for different causes are two Events,
//! each with its own note; a repeat of the same note is one Event with a
//! series count. On both servers, through the controller's publisher.

use super::*;
use rebound::recover::Notice;
use rebound::recover::events::{Events, reasons};
use rebound::workload::JobRef;

async fn events_fold_only_when_their_notes_match(server: Server) {
    let b = bed(server, SimConfig::default()).await;
    b.ensure_namespace("ml").await.expect("namespace");
    let ns = b.ns("ml");
    let job = JobRef {
        kind: rebound::api::WorkloadKind::PyTorchJob,
        api_version: "kubeflow.org/v1".into(),
        plural: "pytorchjobs".into(),
        namespace: ns.clone(),
        name: "folded".into(),
        uid: Some("0b4f0e44-0000-4000-8000-000000000001".into()),
    };
    let events = Events::new(b.client(), Some("test".into()));
    let pod_exit = Notice::normal(reasons::JOB_RESTARTED, "Restart", "Restarted after PodExit");
    let xid = Notice::normal(reasons::JOB_RESTARTED, "Restart", "Restarted after Xid 79");
    events.job(&job, &pod_exit).await;
    events.job(&job, &xid).await;
    events.job(&job, &xid).await;
    let mut got: Vec<(String, i32)> = events_with_reason(&b, &ns, reasons::JOB_RESTARTED)
        .await
        .into_iter()
        .map(|e| (e.note.unwrap_or_default(), e.series.map_or(1, |s| s.count)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("Restarted after PodExit".to_string(), 1),
            ("Restarted after Xid 79".to_string(), 2)
        ]
    );
}

e2e!(events_fold_only_when_their_notes_match);
