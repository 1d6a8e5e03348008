//! What the kubelet loop writes: a pod's effects carried out, deletions
//! confirmed, status patches sent.

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::actors::ascend;
use crate::actors::kubelet::agents::Agents;
use crate::actors::kubelet::pod::Effect;
use crate::actors::runtime::Writer;
use crate::actors::util::{is_conflict, is_not_found};

use super::{Entry, Input, Wrote};

/// Carries out a pod's effects.
pub(super) fn apply(
    agents: &mut Agents,
    k: &str,
    uid: &str,
    fx: Vec<Effect>,
    delete_in_flight: &mut bool,
    writer: &Writer<Input>,
    client: &Client,
) {
    for f in fx {
        match f {
            Effect::StartAgent { run, wiring } => agents.start(k, uid, run, &wiring),
            Effect::StopAgent => agents.stop(k),
            Effect::Delete => {
                if !*delete_in_flight {
                    *delete_in_flight = true;
                    spawn_delete(writer, client, k, uid);
                }
            }
        }
    }
}

/// Graceful deletion finished: the kubelet stopped the containers, now the
/// object goes.
pub(super) fn spawn_delete(writer: &Writer<Input>, client: &Client, k: &str, uid: &str) {
    let Some((ns, name)) = k.split_once('/') else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (name, uid, k) = (name.to_owned(), uid.to_owned(), k.to_owned());
    writer.spawn(async move {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Err(e) = api.delete(&name, &dp).await
            && !is_not_found(&e)
            && !is_conflict(&e)
        {
            tracing::debug!(pod = %name, error = %e, "finish pod deletion");
        }
        Input::Deleted(k)
    });
}

pub(super) fn spawn_status(
    writer: &Writer<Input>,
    client: &Client,
    k: &str,
    e: &Entry,
    status: &PodStatus,
    hash: u64,
) {
    let Some((ns, name)) = k.split_once('/') else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let body = serde_json::to_value(status).unwrap_or(Value::Null);
    let device = e.device.clone().filter(|_| !e.annotated);
    let (name, k, uid, rv, used_rv) = (
        name.to_owned(),
        k.to_owned(),
        e.uid.clone(),
        e.rv.clone(),
        e.rv_n,
    );
    writer.spawn(async move {
        let mut rv = rv;
        let annotated = device.is_some();
        if let Some(d) = device {
            let patch = json!({"metadata": {"annotations": {ascend::DEVICE_ANNOTATION: d}}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(p) => rv = p.resource_version().unwrap_or(rv),
                Err(e) => tracing::debug!(pod = %name, error = %e, "device plugin annotation"),
            }
        }
        let patch = json!({"metadata": {"resourceVersion": rv}, "status": body});
        let outcome = match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(p) => Wrote::Ok {
                hash,
                rv: p.resource_version().unwrap_or_default(),
            },
            Err(e) if is_conflict(&e) => Wrote::Conflict,
            Err(e) if is_not_found(&e) => Wrote::Gone,
            Err(e) => {
                tracing::debug!(pod = %name, error = %e, "pod status");
                Wrote::Failed
            }
        };
        Input::Status {
            key: k,
            uid,
            used_rv,
            annotated,
            outcome,
        }
    });
}
