//! Removing what a bed on a shared cluster made: its namespaces (and the
//! pods in them, waited for), classifications, RBAC and fake nodes, when
//! the bed is cleaned up or, after a test that panicked, when its run is
//! dropped. Apart from the set-up, which it mirrors.

use super::*;

impl Drop for SharedRun {
    /// A shared-cluster bed not cleaned up (a test that panicked) is
    /// cleaned here, on a thread with its own runtime since Drop cannot
    /// wait on the test's; the turn passes to the next bed only after.
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let config = self.config.clone();
        let made = Made::of(self);
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match rt {
                Ok(rt) => rt.block_on(async {
                    match kube::Client::try_from(config) {
                        Ok(client) => remove_shared(&client, &made).await,
                        Err(e) => tracing::warn!(error = %e, "test bed clean-up: no client"),
                    }
                }),
                Err(e) => tracing::warn!(error = %e, "test bed clean-up: no runtime"),
            }
        });
        let _ = done.join();
    }
}

/// The objects a run made.
pub(super) struct Made {
    namespaces: Vec<String>,
    classifications: Vec<String>,
    rbac: Vec<(String, String, String)>,
    nodes: Vec<String>,
    node_prefix: String,
}

impl Made {
    pub(super) fn of(r: &SharedRun) -> Made {
        Made {
            namespaces: lock(&r.namespaces).clone(),
            classifications: lock(&r.classifications).clone(),
            rbac: lock(&r.rbac).clone(),
            nodes: r.nodes.clone(),
            node_prefix: r.node_prefix.clone(),
        }
    }
}

/// Deletes what a run made; failures are logged (a clean-up must go on).
pub(super) async fn remove_shared(client: &kube::Client, made: &Made) {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, Node};
    let dp = kube::api::DeleteParams::default();
    let (namespaces, classifications) = (&made.namespaces, &made.classifications);
    // A real server deletes a namespace's contents in the background
    // (about 5 s on kube-controller-manager even for an empty one), and the
    // next bed's controller watches the whole cluster: it would see this
    // run's jobs, pods, policies and ConfigMaps. So the contents go first,
    // now, and only the empty namespaces are left to terminate.
    purge_namespaces(client, namespaces).await;
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        if let Err(e) = ns_api.delete(ns, &dp).await {
            tracing::debug!(namespace = %ns, error = %e, "test bed clean-up");
        }
    }
    let node_api: Api<Node> = Api::all(client.clone());
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for n in &made.nodes {
        if let Err(e) = node_api.delete(n, &dp).await {
            tracing::debug!(node = %n, error = %e, "test bed clean-up");
        }
        if let Err(e) = lease_api.delete(n, &dp).await {
            tracing::debug!(lease = %n, error = %e, "test bed clean-up");
        }
    }
    // The Ascend device plugin's ConfigMaps of the fake nodes and of the
    // made-up nodes a test named with the run's prefix, and the Events
    // about them in kube-system (where Events about nodes live).
    remove_in_kube_system(client, made).await;
    rbac::remove(client, &made.rbac).await;
    let fc_api: Api<FaultClassification> = Api::all(client.clone());
    for fc in classifications {
        if let Err(e) = fc_api.delete(fc, &dp).await {
            tracing::debug!(classification = %fc, error = %e, "test bed clean-up");
        }
    }
}

/// How long the clean-up waits for the run's pods to be gone.
const POD_DELETION: Duration = Duration::from_secs(30);

/// Deletes everything in the run's namespaces, as the namespace controller
/// would: every namespaced resource the server lists that can be deleted
/// by collection, pods at once (grace 0: no kubelet confirms a pod on a
/// fake node) and without their finalizers (the real Job controller's
/// `batch.kubernetes.io/job-tracking`), until no pod is left or
/// [`POD_DELETION`] passed.
async fn purge_namespaces(client: &kube::Client, namespaces: &[String]) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{DynamicObject, ListParams};
    let force = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let resources: Vec<kube::discovery::ApiResource> =
        match kube::Discovery::new(client.clone()).run().await {
            Ok(d) => d
                .groups()
                .flat_map(|g| g.recommended_resources())
                .filter(|(_, caps)| {
                    caps.scope == kube::discovery::Scope::Namespaced
                        && caps.supports_operation(kube::discovery::verbs::DELETE_COLLECTION)
                })
                .map(|(r, _)| r)
                .collect(),
            Err(e) => {
                tracing::debug!(error = %e, "test bed clean-up: discovery");
                Vec::new()
            }
        };
    for ns in namespaces {
        for r in &resources {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, r);
            if let Err(e) = api.delete_collection(&force, &ListParams::default()).await
                && !crate::actors::util::is_not_found(&e)
            {
                tracing::debug!(namespace = %ns, resource = %r.plural, error = %e, "test bed clean-up");
            }
        }
    }
    let start = std::time::Instant::now();
    loop {
        let mut left = 0;
        for ns in namespaces {
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            let Ok(list) = pods.list_metadata(&ListParams::default()).await else {
                continue;
            };
            for p in list.items {
                left += 1;
                let name = p.name_any();
                if p.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
                {
                    let patch = serde_json::json!({"metadata": {"finalizers": null}});
                    let _ = pods
                        .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
                if p.metadata.deletion_timestamp.is_none() {
                    let _ = pods.delete(&name, &force).await;
                }
            }
        }
        if left == 0 {
            break;
        }
        if start.elapsed() > POD_DELETION {
            tracing::warn!(pods = left, "test bed clean-up: pods still there");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::debug!(took = ?start.elapsed(), "test bed clean-up: namespaces purged");
}

/// Deletes the run's objects in kube-system: device-plugin ConfigMaps and
/// Events whose names carry the run's node prefix.
async fn remove_in_kube_system(client: &kube::Client, made: &Made) {
    use k8s_openapi::api::core::v1::{ConfigMap, Event};
    let dp = kube::api::DeleteParams::default();
    let ns = crate::actors::ascend::NAMESPACE;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let marker = crate::actors::ascend::configmap_name(&made.node_prefix);
    match cms.list_metadata(&kube::api::ListParams::default()).await {
        Ok(list) => {
            for name in list.items.iter().map(ResourceExt::name_any) {
                if name.starts_with(&marker)
                    && let Err(e) = cms.delete(&name, &dp).await
                    && !crate::actors::util::is_not_found(&e)
                {
                    tracing::debug!(configmap = %name, error = %e, "test bed clean-up");
                }
            }
        }
        Err(e) => tracing::debug!(error = %e, "test bed clean-up: device-plugin ConfigMaps"),
    }
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    match events.list(&kube::api::ListParams::default()).await {
        Ok(list) => {
            for ev in list.items {
                let about = ev.involved_object.name.as_deref().unwrap_or_default();
                if about.starts_with(&made.node_prefix)
                    && let Err(e) = events.delete(&ev.name_any(), &dp).await
                    && !crate::actors::util::is_not_found(&e)
                {
                    tracing::debug!(event = %ev.name_any(), error = %e, "test bed clean-up");
                }
            }
        }
        Err(e) => tracing::debug!(error = %e, "test bed clean-up: Events"),
    }
}
