//! What kube-controller-manager does behind a real API server, for the
//! parts that clients of the embedded one see: the ServiceAccount
//! controller (`default` in every namespace), the root CA publisher
//! (`kube-root-ca.crt`), the namespace controller (a deleted namespace is
//! `Terminating` with its deletion conditions until its content is gone)
//! and the garbage collector (dependents of a gone owner; `foregroundDeletion`
//! and `orphan` finalizers). As in the real one, all of it happens
//! asynchronously, after the request that caused it has been answered:
//! writes queue work, a task of the server does it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use super::ops::{
    DeleteOpts, Loc, NS_KEY, WriteOpts, finalizers, meta_mut, meta_str, om_terminating,
};
use super::state::Shared;
use super::store::Inner;
use super::validate;
use super::work::Work;

/// The field manager of everything the emulated controllers write.
pub const MANAGER: &str = "kube-controller-manager";

/// The description the root CA publisher puts on `kube-root-ca.crt`.
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// A placeholder CA: the embedded server serves plain HTTP, so no client
/// verifies anything with it; its shape is a PEM certificate's.
const ROOT_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBbTCCAROgAwIBAgIUcmVib3VuZC1zaW0tZW1iZWRkZWQwCgYIKoZIzj0EAwIw\nHTEbMBkGA1UEAwwScmVib3VuZC1zaW0tcm9vdC1jYTAgFw0yNjAxMDEwMDAwMDBa\nGA8yMTI2MDEwMTAwMDAwMFowHTEbMBkGA1UEAwwScmVib3VuZC1zaW0tcm9vdC1j\nYTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABHJlYm91bmQtc2ltLWVtYmVkZGVk\nLXNlcnZlci1oYXMtbm8tdGxzLXRoaXMtaXMtYS1wbGFjZWhvbGRlci1rZXkwCgYI\nKoZIzj0EAwIDSAAwRQIgcmVib3VuZC1zaW0tcGxhY2Vob2xkZXItc2lnbmF0dXJl\nAiEAcmVib3VuZC1zaW0tcGxhY2Vob2xkZXItc2lnbmF0dXJlLTI=\n-----END CERTIFICATE-----\n";

/// Runs the controllers until the server's state is dropped.
pub async fn run(shared: Weak<Shared>) {
    let Some(queue) = shared.upgrade().map(|s| s.kcm.clone()) else {
        return;
    };
    // namespaces still terminating, re-checked until their content is gone
    let mut terminating: BTreeSet<String> = BTreeSet::new();
    // foreground deletions waiting for their dependents
    let mut waiting: Vec<(Arc<str>, String, String)> = Vec::new();
    loop {
        let wait = if terminating.is_empty() && waiting.is_empty() {
            Duration::from_secs(3600)
        } else {
            Duration::from_millis(200)
        };
        let _ = tokio::time::timeout(wait, queue.notified()).await;
        // a short pause, as a real controller acts after the answer
        tokio::time::sleep(Duration::from_millis(5)).await;
        let Some(s) = shared.upgrade() else {
            return;
        };
        let work = queue.take();
        let mut w = s.store.write();
        for item in work {
            match item {
                Work::NamespaceCreated(ns) => s.namespace_created(&mut w, &ns),
                Work::NamespaceDeleting(ns) => {
                    terminating.insert(ns);
                }
                Work::OwnerGone(uid) => s.collect_dependents(&mut w, &uid),
                Work::Establish(name) => s.establish(&mut w, &name),
                Work::CrdCleanup(name) => s.crd_cleanup(&mut w, &name),
                Work::Finalize(key, ns, name) => waiting.push((key, ns, name)),
            }
        }
        waiting.retain(|(key, ns, name)| !s.finalize_propagation(&mut w, key, ns, name));
        terminating.retain(|ns| !s.namespace_step(&mut w, ns));
    }
}

fn controller_opts() -> WriteOpts {
    WriteOpts {
        manager: MANAGER.into(),
        ..WriteOpts::default()
    }
}

fn condition(ty: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({"type": ty, "status": if status { "True" } else { "False" }, "lastTransitionTime": validate::now_rfc3339(),
        "reason": reason, "message": message})
}

impl Shared {
    fn namespace_created(&self, w: &mut Inner, ns: &str) {
        let Some(nso) = w.get(NS_KEY, "", ns) else {
            return;
        };
        if om_terminating(&nso) {
            return;
        }
        let opts = controller_opts();
        if let Some(loc) = self.loc_of("", "v1", "serviceaccounts", Some(ns))
            && w.get(&loc.key, ns, "default").is_none()
        {
            let _ = self.create_locked(w, &loc, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}), &opts, None);
        }
        if let Some(loc) = self.loc_of("", "v1", "configmaps", Some(ns))
            && w.get(&loc.key, ns, "kube-root-ca.crt").is_none()
        {
            let _ = self.create_locked(
                w,
                &loc,
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt",
                    "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}}, "data": {"ca.crt": ROOT_CA}}),
                &opts,
                None,
            );
        }
    }

    /// One pass of the namespace controller over a terminating namespace:
    /// deletes its content, writes its conditions and, once nothing is
    /// left, removes the `kubernetes` finalizer. True when done.
    fn namespace_step(&self, w: &mut Inner, ns: &str) -> bool {
        let Some(nso) = w.get(NS_KEY, "", ns) else {
            return true;
        };
        let reg = self.registry_snapshot();
        let mut remaining: BTreeMap<String, usize> = BTreeMap::new();
        let mut held: BTreeMap<String, usize> = BTreeMap::new();
        for res in reg
            .all()
            .filter(|r| r.namespaced && r.storage_alias.is_none())
        {
            let key: Arc<str> = Arc::from(res.key().as_str());
            let objs: Vec<(String, Arc<Value>)> = w
                .iter(&key, Some(ns))
                .map(|((_, n), o)| (n.clone(), o.clone()))
                .collect();
            for (name, o) in objs {
                if !om_terminating(&o) {
                    let _ = self.delete_locked(w, &key, ns, &name, &DeleteOpts::default());
                }
            }
            let left: Vec<Arc<Value>> = w.iter(&key, Some(ns)).map(|(_, o)| o.clone()).collect();
            if !left.is_empty() {
                remaining.insert(format!("{}.{}", res.plural, res.group), left.len());
                for o in &left {
                    for f in finalizers(o) {
                        if let Some(f) = f.as_str() {
                            *held.entry(f.to_string()).or_default() += 1;
                        }
                    }
                }
            }
        }
        let content = if remaining.is_empty() {
            condition(
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed",
            )
        } else {
            let list: Vec<String> = remaining
                .iter()
                .map(|(r, n)| format!("{r} has {n} resource instances"))
                .collect();
            condition(
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                &format!("Some resources are remaining: {}", list.join(", ")),
            )
        };
        let fins = if held.is_empty() {
            condition(
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            )
        } else {
            let list: Vec<String> = held
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            condition(
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                &format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    list.join(", ")
                ),
            )
        };
        let mut conds = vec![
            condition(
                "NamespaceDeletionDiscoveryFailure",
                false,
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
            condition(
                "NamespaceDeletionGroupVersionParsingFailure",
                false,
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
            condition(
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
            content,
            fins,
        ];
        // a condition keeps its transition time while it does not change
        let old: Vec<Value> = nso
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for c in &mut conds {
            if let Some(o) = old.iter().find(|o| o.get("type") == c.get("type"))
                && o.get("status") == c.get("status")
                && o.get("reason") == c.get("reason")
                && o.get("message") == c.get("message")
            {
                *c = o.clone();
            }
        }
        let mut next = (*nso).clone();
        if remaining.is_empty() {
            let spec_fins: Vec<Value> = next
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|f| f.as_str() != Some("kubernetes"))
                .collect();
            next["spec"]["finalizers"] = Value::Array(spec_fins.clone());
            if spec_fins.is_empty() && finalizers(&next).is_empty() {
                let _ = self.finalize_removal(w, &Arc::from(NS_KEY), "", ns, "Background", None);
                return true;
            }
        }
        next["status"]["conditions"] = Value::Array(conds);
        if next != *nso {
            w.put(&Arc::from(NS_KEY), next);
        }
        false
    }

    /// The garbage collector's part of `Foreground` and `Orphan` deletion:
    /// dependents go (Foreground) or lose their reference (Orphan), then
    /// the owner's finalizer goes, and with it the owner.
    /// True when done.
    fn finalize_propagation(&self, w: &mut Inner, key: &Arc<str>, ns: &str, name: &str) -> bool {
        let Some(owner) = w.get(key, ns, name) else {
            return true;
        };
        let uid = meta_str(&owner, "uid").unwrap_or("").to_string();
        let fins = finalizers(&owner);
        let fg = fins.iter().any(|f| f == "foregroundDeletion");
        let orphan = fins.iter().any(|f| f == "orphan");
        if orphan {
            self.orphan_dependents(w, &uid);
        }
        if fg {
            // dependents that are themselves held (finalizers, a kubelet)
            // keep the owner waiting, as in the real collector
            self.collect_dependents(w, &uid);
            if !w.dependents(&uid).is_empty() {
                return false;
            }
        }
        if !fg && !orphan {
            return true;
        }
        let mut next = (*owner).clone();
        let left: Vec<Value> = fins
            .into_iter()
            .filter(|f| f != "foregroundDeletion" && f != "orphan")
            .collect();
        if left.is_empty() {
            meta_mut(&mut next).remove("finalizers");
            let _ = self.finalize_removal(w, key, ns, name, "Background", Some(next));
        } else {
            meta_mut(&mut next).insert("finalizers".into(), Value::Array(left));
            w.put(key, next);
        }
        true
    }

    fn establish(&self, w: &mut Inner, name: &str) {
        let key: Arc<str> = Arc::from("apiextensions.k8s.io/customresourcedefinitions");
        if let Some(crd) = w.get(&key, "", name) {
            let mut next = (*crd).clone();
            next["status"] = super::crd::established_status(&crd);
            w.put(&key, next);
        }
    }

    fn crd_cleanup(&self, w: &mut Inner, name: &str) {
        let key: Arc<str> = Arc::from(super::crd::CRD_KEY);
        let Some(crd) = w.get(&key, "", name) else {
            return;
        };
        let mut next = (*crd).clone();
        let left: Vec<Value> = finalizers(&crd)
            .into_iter()
            .filter(|f| f.as_str() != Some(super::crd::CRD_FINALIZER))
            .collect();
        if left.is_empty() {
            meta_mut(&mut next).remove("finalizers");
            // removing it drops its objects and stops serving it
            let _ = self.finalize_removal(w, &key, "", name, "Background", None);
        } else {
            meta_mut(&mut next).insert("finalizers".into(), Value::Array(left));
            w.put(&key, next);
        }
    }

    fn loc_of(&self, group: &str, version: &str, plural: &str, ns: Option<&str>) -> Option<Loc> {
        let res = self.lookup(group, version, plural)?;
        Some(Loc::new(res, version, ns, None, None))
    }
}
