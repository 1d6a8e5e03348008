//! DELETE and deletecollection: preconditions, finalizers,
//! propagation policies, synchronous owner garbage collection, namespace
//! and CRD cascades.

use std::sync::Arc;

use serde_json::{Value, json};

use super::crd::{CRD_FINALIZER, CRD_KEY};
use super::errors::{ApiError, Cause};
use super::ops::{
    DeleteOpts, ListQuery, Loc, NS_KEY, Reply, finalizers, meta_mut, meta_str, om_terminating,
};
use super::state::Shared;
use super::store::Inner;
use super::work::Work;

impl Shared {
    /// Removes an object for good and collects its dependents; returns its
    /// last state.
    pub(super) fn finalize_removal(
        &self,
        w: &mut Inner,
        key: &Arc<str>,
        ns: &str,
        name: &str,
        policy: &str,
        last: Option<Value>,
    ) -> Option<Arc<Value>> {
        let change = w.remove_as(key, ns, name, last)?;
        let uid = meta_str(&change.obj, "uid").unwrap_or("").to_string();
        if key.as_ref() == CRD_KEY {
            let group = change
                .obj
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or("");
            let plural = change
                .obj
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or("");
            w.drop_resource(&super::resources::key_of(group, plural));
            if let Ok(mut reg) = self.registry.write() {
                reg.remove(group, plural);
            }
        }
        if !uid.is_empty() && policy != "Orphan" && !w.dependents(&uid).is_empty() {
            // the garbage collector acts after the answer, as a real one
            self.kcm.push(Work::OwnerGone(uid));
        }
        Some(change.obj.clone())
    }

    /// Background garbage collection: dependents whose last owner is gone are
    /// deleted; references to the gone owner are removed otherwise.
    pub(super) fn collect_dependents(&self, w: &mut Inner, owner_uid: &str) {
        for (key, ns, name) in w.dependents(owner_uid) {
            let Some(dep) = w.get(&key, &ns, &name) else {
                continue;
            };
            let refs: Vec<Value> = dep
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let remaining: Vec<Value> = refs
                .into_iter()
                .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
                .collect();
            if remaining.is_empty() {
                let _ = self.delete_locked(w, &key, &ns, &name, &DeleteOpts::default());
            } else {
                let mut d = (*dep).clone();
                meta_mut(&mut d).insert("ownerReferences".into(), Value::Array(remaining));
                w.put(&key, d);
            }
        }
    }

    pub(super) fn orphan_dependents(&self, w: &mut Inner, owner_uid: &str) {
        for (key, ns, name) in w.dependents(owner_uid) {
            let Some(dep) = w.get(&key, &ns, &name) else {
                continue;
            };
            let mut d = (*dep).clone();
            let m = meta_mut(&mut d);
            let refs: Vec<Value> = m
                .get("ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
                .collect();
            if refs.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), Value::Array(refs));
            }
            w.put(&key, d);
        }
    }

    /// DELETE one object.
    pub fn delete(&self, loc: &Loc, opts: &DeleteOpts) -> Result<Reply, ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        check_propagation(opts)?;
        if loc.sub.is_some() {
            return Err(ApiError::method_not_allowed(
                "DELETE is not supported on subresources",
            ));
        }
        let mut w = self.store.write();
        let old = w
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        if loc.key.as_ref() == NS_KEY
            && matches!(name.as_str(), "default" | "kube-system" | "kube-public")
        {
            return Err(ApiError::forbidden(
                loc.target(&name),
                "this namespace may not be deleted",
                vec![],
            ));
        }
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::precondition(
                &loc.res.kind,
                &name,
                "UID",
                uid,
                meta_str(&old, "uid").unwrap_or(""),
                "The object might have been deleted and then recreated",
            ));
        }
        if let Some(rv) = &opts.rv
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::precondition(
                &loc.res.kind,
                &name,
                "ResourceVersion",
                rv,
                meta_str(&old, "resourceVersion").unwrap_or(""),
                "The object might have been modified",
            ));
        }
        if opts.dry_run {
            return Ok(Reply::ok(self.deleted_body(loc, &old)));
        }
        let (obj, removed) = self.delete_locked(&mut w, &loc.key, loc.ns_str(), &name, opts)?;
        if !removed || loc.res.return_deleted_object {
            return Ok(Reply::ok(self.view(loc, &obj)));
        }
        Ok(Reply::ok(self.deleted_body(loc, &obj)))
    }

    pub(super) fn deleted_body(&self, loc: &Loc, obj: &Value) -> Value {
        if loc.res.return_deleted_object {
            return self.view(loc, obj);
        }
        let mut details = json!({"name": meta_str(obj, "name"), "kind": loc.res.plural, "uid": meta_str(obj, "uid")});
        if !loc.res.group.is_empty() {
            details["group"] = json!(loc.res.group);
        }
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
    }

    /// Deletes under the lock; returns the object and whether it is gone
    /// (false: finalizers or a held pod keep it, with deletionTimestamp).
    pub(super) fn delete_locked(
        &self,
        w: &mut Inner,
        key: &Arc<str>,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let Some(old) = w.get(key, ns, name) else {
            return Err(ApiError::internal(format!("{key} {ns}/{name} vanished")));
        };
        let policy = opts
            .propagation
            .clone()
            .unwrap_or_else(|| "Background".into());
        check_propagation(opts)?;
        let now = || chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        if key.as_ref() == NS_KEY {
            // the namespace controller empties it, then removes it
            if om_terminating(&old) {
                return Ok((old, false));
            }
            let mut d = (*old).clone();
            meta_mut(&mut d).insert("deletionTimestamp".into(), json!(now()));
            d["status"]["phase"] = json!("Terminating");
            let change = w.put(key, d);
            self.kcm.push(Work::NamespaceDeleting(name.to_string()));
            return Ok((change.obj.clone(), false));
        }
        if key.as_ref() == CRD_KEY {
            // the CRD finalizer deletes its objects first, then the CRD
            if om_terminating(&old) {
                return Ok((old, false));
            }
            let mut d = (*old).clone();
            let m = meta_mut(&mut d);
            m.insert("deletionTimestamp".into(), json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            let mut fins = finalizers(&old);
            fins.push(json!(CRD_FINALIZER));
            m.insert("finalizers".into(), Value::Array(fins));
            if let Some(cs) = d
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
            {
                cs.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now(),
                    "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
            }
            let change = w.put(key, d);
            self.kcm.push(Work::CrdCleanup(name.to_string()));
            return Ok((change.obj.clone(), false));
        }
        let is_pod = key.as_ref() == "/pods";
        let bound = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let terminal = matches!(
            old.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        let hold =
            is_pod && self.opts.hold_pod_deletion && bound && !terminal && opts.grace != Some(0);
        let mut fins = finalizers(&old);
        let gc_fin = match policy.as_str() {
            "Orphan" => Some("orphan"),
            "Foreground" => Some("foregroundDeletion"),
            _ => None,
        };
        if let Some(f) = gc_fin
            && !om_terminating(&old)
            && !fins.iter().any(|x| x == f)
        {
            fins.push(json!(f));
        }
        if !fins.is_empty() || hold {
            let grace = if hold {
                opts.grace
                    .or_else(|| {
                        old.pointer("/spec/terminationGracePeriodSeconds")
                            .and_then(Value::as_i64)
                    })
                    .unwrap_or(30)
            } else {
                0
            };
            if om_terminating(&old) {
                // a held pod's grace period may only get shorter
                let cur = old
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if !(hold && grace < cur) {
                    return Ok((old, false));
                }
            }
            let mut d = (*old).clone();
            let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
            let m = meta_mut(&mut d);
            m.insert(
                "deletionTimestamp".into(),
                json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if !fins.is_empty() {
                m.insert("finalizers".into(), Value::Array(fins));
            }
            let change = w.put(key, d);
            if gc_fin.is_some() {
                self.kcm.push(Work::Finalize(
                    key.clone(),
                    ns.to_string(),
                    name.to_string(),
                ));
            }
            return Ok((change.obj.clone(), false));
        }
        // a pod is first written with its deletion stamped and grace 0,
        // then goes: two events (MODIFIED, DELETED), as the real pod
        // strategy's graceful deletion writes even a deletion with grace 0
        // (a kubelet's watch sees the MODIFIED)
        if is_pod
            && (!om_terminating(&old)
                || old
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    != Some(0))
        {
            let mut d = (*old).clone();
            let m = meta_mut(&mut d);
            m.entry("deletionTimestamp").or_insert_with(|| json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            w.put(key, d);
        }
        let old = w.get(key, ns, name).unwrap_or(old);
        // a pod goes with its deletion stamped on its last state
        let last = is_pod.then(|| {
            let mut d = (*old).clone();
            let m = meta_mut(&mut d);
            m.entry("deletionTimestamp").or_insert_with(|| json!(now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            d
        });
        let last = self
            .finalize_removal(w, key, ns, name, &policy, last)
            .ok_or_else(|| ApiError::internal("object vanished during delete"))?;
        Ok((last, true))
    }

    /// DELETE on a collection, with selectors; returns the deleted objects.
    pub fn delete_collection(
        &self,
        loc: &Loc,
        q: &ListQuery,
        opts: &DeleteOpts,
    ) -> Result<Reply, ApiError> {
        if loc.key.as_ref() == NS_KEY {
            return Err(ApiError::not_allowed_here());
        }
        let mut w = self.store.write();
        let items = self.select(&w, loc, q);
        let mut out = Vec::new();
        for o in items {
            let ns = meta_str(&o, "namespace").unwrap_or("").to_string();
            let name = meta_str(&o, "name").unwrap_or("").to_string();
            if w.get(&loc.key, &ns, &name).is_none() {
                continue;
            }
            if opts.dry_run {
                out.push(self.view(loc, &o));
                continue;
            }
            let (obj, _) = self.delete_locked(&mut w, &loc.key, &ns, &name, opts)?;
            out.push(self.view(loc, &obj));
        }
        Ok(Reply::ok(json!({
            "kind": format!("{}List", loc.res.kind),
            "apiVersion": loc.res.api_version(&loc.version),
            "metadata": {"resourceVersion": w.rv().to_string()},
            "items": out,
        })))
    }
}

/// `propagationPolicy` must be one the real server knows (checked before
/// the object is looked up, as DeleteOptions validation is).
fn check_propagation(opts: &DeleteOpts) -> Result<(), ApiError> {
    match opts.propagation.as_deref() {
        None | Some("Orphan" | "Foreground" | "Background") => Ok(()),
        Some(policy) => Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![Cause {
                reason: "FieldValueNotSupported",
                field: "propagationPolicy".into(),
                message: format!(
                    "Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                ),
            }],
        )),
    }
}
