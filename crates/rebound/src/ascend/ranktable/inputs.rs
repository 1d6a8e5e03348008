//! The rank-table task's inputs: its own watches (labelled pods,
//! `rings-config-*` ConfigMaps, Volcano Jobs, batch Jobs, Deployments),
//! forwarded into one channel with the watcher's backoff, and the guard
//! that stops them with the task.

use super::objects::JobKind;
use super::table::{LABEL_KEY, LABEL_VALUE};
use crate::metrics::{KindLabels, Metrics};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::mpsc;

/// One input of the task.
#[allow(clippy::large_enum_variant)]
pub(super) enum In {
    Pod(Event<Pod>),
    ConfigMap(Event<ConfigMap>),
    Job(JobKind, Event<DynamicObject>),
    Leader(bool),
    Tick,
}

/// The task's watches and timers, stopped with it (also when it is aborted,
/// as a killed controller is in tests).
pub(super) struct Tasks(pub(super) Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

pub(super) async fn watches(
    client: &Client,
    metrics: &Metrics,
    tx: &mpsc::Sender<In>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let labelled = || crate::k8s::watch::config().labels(&format!("{LABEL_KEY}={LABEL_VALUE}"));
    let mut tasks = vec![
        forward(
            "rank-table pods",
            watcher(Api::<Pod>::all(client.clone()), labelled()),
            (tx.clone(), metrics.clone()),
            In::Pod,
        ),
        forward(
            "rank-table configmaps",
            watcher(Api::<ConfigMap>::all(client.clone()), labelled()),
            (tx.clone(), metrics.clone()),
            In::ConfigMap,
        ),
    ];
    let mut kinds = vec![
        (JobKind::Batch, ApiResource::erase::<Job>(&())),
        (JobKind::Deployment, ApiResource::erase::<Deployment>(&())),
    ];
    match crate::k8s::discover::job_kinds(client).await {
        Ok(found) => kinds.extend(
            found
                .into_iter()
                .filter(|ar| ar.group == "batch.volcano.sh")
                .map(|ar| (JobKind::Volcano, ar)),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "discovery failed; rank tables are built for batch Jobs and Deployments only")
        }
    }
    for (kind, ar) in kinds {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        tasks.push(forward(
            "rank-table jobs",
            watcher(api, labelled()),
            (tx.clone(), metrics.clone()),
            move |e| In::Job(kind, e),
        ));
    }
    tasks
}

/// Forward one watch into the task; failures are logged, counted in
/// `rebound_watch_restarts_total` and retried with the watcher's backoff.
fn forward<K, S>(
    name: &'static str,
    stream: S,
    (tx, metrics): (mpsc::Sender<In>, Metrics),
    wrap: impl Fn(Event<K>) -> In + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: Send + 'static,
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        let stream = stream.default_backoff();
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(e) => {
                    if tx.send(wrap(e)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    metrics
                        .watch_restarts
                        .get_or_create(&KindLabels { kind: name.into() })
                        .inc();
                    tracing::warn!(watch = name, error = %e, "watch failed; retrying with backoff");
                }
            }
        }
    })
}
