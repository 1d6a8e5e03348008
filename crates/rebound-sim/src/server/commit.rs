//! The common tail of update, patch and apply: status-subresource
//! isolation, system metadata, pod update rules, immutable data,
//! finalizers while deleting, managed fields, admission, no-op detection
//! and generation.

use std::sync::Arc;

use serde_json::{Value, json};

use super::apply::{self, Lists};
use super::crd;
use super::defaults;
use super::errors::{ApiError, Cause};
use super::ops::{Loc, Reply, WriteOpts, finalizers, meta, meta_mut, om_terminating, spec_part};
use super::podrules::pod_spec_update_allowed;
use super::state::Shared;
use super::store::Inner;

impl Shared {
    /// The common tail of update, patch and apply: subresource isolation,
    /// system metadata, admission, no-op detection, generation, finalizers.
    pub(super) fn commit_update(
        &self,
        w: &mut Inner,
        loc: &Loc,
        old: &Arc<Value>,
        mut cand: Value,
        opts: &WriteOpts,
        applied: bool,
    ) -> Result<Reply, ApiError> {
        let res = loc.res.clone();
        let name = loc.name.clone().unwrap_or_default();
        let is_status = loc.sub.as_deref() == Some("status");
        if loc.sub.is_some() && !is_status {
            return Err(ApiError::method_not_allowed(format!(
                "subresource {:?} does not support this verb",
                loc.sub
            )));
        }
        if is_status {
            if !res.status {
                return Err(ApiError::unknown_path("status"));
            }
            let mut next = (**old).clone();
            match cand.get("status") {
                Some(s) => {
                    let qos = old.pointer("/status/qosClass").cloned();
                    // The real server refuses to change a pod's QoS class
                    // (set on create from every container's resources).
                    if res.group.is_empty()
                        && res.plural == "pods"
                        && let (Some(q), Some(to)) = (&qos, s.get("qosClass"))
                        && q != to
                    {
                        return Err(ApiError::invalid(
                            "",
                            "Pod",
                            &name,
                            vec![Cause {
                                reason: "FieldValueInvalid",
                                field: "status.qosClass".into(),
                                message: format!("Invalid value: {to}: field is immutable"),
                            }],
                        ));
                    }
                    next["status"] = s.clone();
                    // the server's own status field stays
                    if let Some(q) = qos
                        && next["status"].get("qosClass").is_none()
                        && next["status"].is_object()
                    {
                        next["status"]["qosClass"] = q;
                    }
                }
                None => {
                    if let Some(m) = next.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if res.status_writes_metadata {
                for k in ["labels", "annotations"] {
                    match meta(&cand).and_then(|m| m.get(k)).cloned() {
                        Some(v) => {
                            meta_mut(&mut next).insert(k.into(), v);
                        }
                        None => {
                            meta_mut(&mut next).remove(k);
                        }
                    }
                }
            }
            if let Some(mf) = meta(&cand).and_then(|m| m.get("managedFields")).cloned() {
                meta_mut(&mut next).insert("managedFields".into(), mf);
            }
            cand = next;
        } else if res.status {
            match old.get("status") {
                Some(s) => cand["status"] = s.clone(),
                None => {
                    if let Some(m) = cand.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        if res.group.is_empty() && res.plural == "namespaces" {
            cand["status"] = old
                .get("status")
                .cloned()
                .unwrap_or(json!({"phase": "Active"}));
        }
        // system metadata comes from the stored object
        {
            let om = meta(old).cloned().unwrap_or_default();
            let m = meta_mut(&mut cand);
            for k in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
                "generateName",
            ] {
                match om.get(k) {
                    Some(v) => {
                        m.insert(k.into(), v.clone());
                    }
                    None => {
                        m.remove(k);
                    }
                }
            }
            if !m.contains_key("managedFields")
                && let Some(mf) = om.get("managedFields")
            {
                m.insert("managedFields".into(), mf.clone());
            }
        }
        if res.group.is_empty() && !res.custom {
            match res.plural.as_str() {
                "pods" => {
                    defaults::pod(&mut cand);
                    defaults::pod_only(&mut cand);
                    defaults::pod_conditions(&mut cand);
                }
                "nodes" => defaults::node(&mut cand),
                _ => {}
            }
        }
        if res.group.is_empty()
            && res.plural == "pods"
            && !is_status
            && !pod_spec_update_allowed(old, &cand)
        {
            return Err(ApiError::invalid(&res.group, &res.kind, &name, vec![Cause {
                reason: "FieldValueForbidden",
                field: "spec".into(),
                message: "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
            }]));
        }
        if res.group.is_empty() && matches!(res.plural.as_str(), "configmaps" | "secrets") {
            let configmap = res.plural == "configmaps";
            if !configmap {
                // a patch's stringData lands in data before the check
                defaults::secret_string_data(&mut cand);
            }
            let causes = super::kindcheck::immutable_update(old, &cand, configmap);
            if !causes.is_empty() {
                return Err(ApiError::invalid("", &res.kind, &name, causes));
            }
        }
        if om_terminating(old) {
            let old_f = finalizers(old);
            if finalizers(&cand).iter().any(|f| !old_f.contains(f)) {
                let new: Vec<String> = finalizers(&cand)
                    .iter()
                    .filter(|f| !old_f.contains(f))
                    .map(|f| format!("{:?}", f.as_str().unwrap_or("")))
                    .collect();
                let message = format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    new.join(", ")
                );
                // the real server reports it twice (metadata and strategy)
                let cause = || Cause {
                    reason: "FieldValueForbidden",
                    field: "metadata.finalizers".into(),
                    message: message.clone(),
                };
                return Err(ApiError::invalid(
                    &res.group,
                    &res.kind,
                    &name,
                    vec![cause(), cause()],
                ));
            }
        }
        if !applied && !opts.manager.is_empty() && loc.res.is_events_v1() {
            let old_v = super::events::core_to_v1(old);
            let mut cand_v = super::events::core_to_v1(&cand);
            apply::record_update(
                &old_v,
                &mut cand_v,
                &opts.manager,
                Lists::builtin(),
                &res.api_version(&loc.version),
                "",
            );
            match cand_v.pointer("/metadata/managedFields").cloned() {
                Some(mf) => {
                    meta_mut(&mut cand).insert("managedFields".into(), mf);
                }
                None => {
                    meta_mut(&mut cand).remove("managedFields");
                }
            }
        } else if !applied && !opts.manager.is_empty() {
            apply::record_update(
                old,
                &mut cand,
                &opts.manager,
                if res.custom {
                    Lists::custom(res.schemas.get(&loc.version).map(|s| s.as_ref()))
                } else {
                    Lists::builtin()
                },
                &res.api_version(&loc.version),
                if is_status { "status" } else { "" },
            );
        }
        let mut warnings = Vec::new();
        self.admit(loc, &mut cand, opts, &mut warnings)?;
        if cand == **old {
            return Ok(Reply {
                code: 200,
                body: self.view(loc, old),
                warnings,
            });
        }
        if res.generation && spec_part(&cand) != spec_part(old) {
            let g = meta(old)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut cand).insert("generation".into(), json!(g + 1));
        }
        if res.group == "apiextensions.k8s.io" && !is_status {
            let info = crd::resource_of(&cand)?;
            if !opts.dry_run
                && let Ok(mut reg) = self.registry.write()
            {
                reg.insert(info);
            }
        }
        if opts.dry_run {
            return Ok(Reply {
                code: 200,
                body: self.view(loc, &cand),
                warnings,
            });
        }
        if om_terminating(&cand) && finalizers(&cand).is_empty() && !finalizers(old).is_empty() {
            // the DELETED event carries the last stored state; the answer
            // is the object as this write made it
            let change =
                self.finalize_removal(w, &loc.key, loc.ns_str(), &name, "Background", None);
            let body = match change {
                Some(_) => {
                    // with the resourceVersion it was last stored at
                    let mut v = cand.clone();
                    v["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                    self.view(loc, &v)
                }
                None => Value::Null,
            };
            return Ok(Reply {
                code: 200,
                body,
                warnings,
            });
        }
        let change = w.put(&loc.key, cand);
        Ok(Reply {
            code: 200,
            body: self.view(loc, &change.obj),
            warnings,
        })
    }
}
