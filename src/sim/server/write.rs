//! Writes: create, update (PUT), patch of every type and server-side apply,
//! all ending in one commit step with status-subresource isolation,
//! system metadata, admission, no-op detection, generation and finalizers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::apply::{self, ApplyRequest, Lists, Section};
use super::crd;
use super::defaults;
use super::errors::{ApiError, Cause, Target};
use super::ops::{
    Loc, NS_KEY, Reply, WriteOpts, finalizers, meta, meta_mut, meta_str, om_terminating,
    parse_yaml_or_json, spec_part,
};
use super::patch::{self, PatchType};
use super::resources::{ResourceInfo, StatusOnCreate};
use super::state::Shared;
use super::store::Inner;
use super::validate;

impl Shared {
    /// POST: create.
    pub fn create(&self, loc: &Loc, mut body: Value, opts: &WriteOpts) -> Result<Reply, ApiError> {
        if loc.res.pod_extras && matches!(loc.sub.as_deref(), Some("binding" | "eviction")) {
            return self.pod_subresource_post(loc, &body);
        }
        if loc.sub.is_some() || loc.name.is_some() {
            return Err(ApiError::method_not_allowed(
                "POST is not supported on this path",
            ));
        }
        self.normalise(loc, &mut body)?;
        let mut w = self.store.write();
        self.create_locked(&mut w, loc, body, opts, None)
    }

    pub(super) fn create_locked(
        &self,
        w: &mut Inner,
        loc: &Loc,
        mut body: Value,
        opts: &WriteOpts,
        applied: Option<&Value>,
    ) -> Result<Reply, ApiError> {
        let res = loc.res.clone();
        // namespace from path; must agree with the body and must exist
        let ns = loc.ns_str().to_string();
        {
            let m = meta_mut(&mut body);
            if res.namespaced {
                if ns.is_empty() {
                    return Err(ApiError::method_not_allowed(
                        "the namespace of the object must be given in the path",
                    ));
                }
                match m.get("namespace").and_then(Value::as_str) {
                    Some(b) if !b.is_empty() && b != ns => {
                        return Err(ApiError::bad_request(
                            "the namespace of the provided object does not match the namespace sent on the request",
                        ));
                    }
                    _ => {
                        m.insert("namespace".into(), json!(ns));
                    }
                }
            } else {
                m.remove("namespace");
            }
            let has_name = m
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            if !has_name {
                match m.get("generateName").and_then(Value::as_str) {
                    Some(g) if !g.is_empty() => {
                        let n = format!("{g}{}", validate::name_suffix());
                        m.insert("name".into(), json!(n));
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            &res.group,
                            &res.kind,
                            "",
                            vec![Cause {
                                reason: "FieldValueRequired",
                                field: "metadata.name".into(),
                                message: "Required value: name or generateName is required".into(),
                            }],
                        ));
                    }
                }
            }
        }
        let name = meta_str(&body, "name").unwrap_or("").to_string();
        if res.namespaced {
            match w.get(NS_KEY, "", &ns) {
                None => {
                    return Err(ApiError::not_found(Target {
                        group: "",
                        plural: "namespaces",
                        name: &ns,
                    }));
                }
                Some(n) if om_terminating(&n) => {
                    return Err(ApiError::forbidden(
                        loc.target(&name),
                        &format!(
                            "unable to create new content in namespace {ns} because it is being terminated"
                        ),
                        vec![Cause {
                            reason: "NamespaceTerminating",
                            field: "metadata.namespace".into(),
                            message: format!("namespace {ns} is being terminated"),
                        }],
                    ));
                }
                Some(_) => {}
            }
        }
        if w.get(&loc.key, &ns, &name).is_some() {
            return Err(ApiError::already_exists(loc.target(&name)));
        }
        // status on create
        match res.status_on_create {
            StatusOnCreate::Keep => {}
            StatusOnCreate::Drop => {
                if let Some(m) = body.as_object_mut() {
                    m.remove("status");
                }
            }
            StatusOnCreate::PodPending => {
                let qos = qos_class(&body);
                body["status"] = json!({"phase": "Pending", "qosClass": qos});
            }
        }
        self.kind_defaults(&res, &mut body);
        let mut warnings = Vec::new();
        self.admit(loc, &mut body, opts, &mut warnings)?;
        {
            let m = meta_mut(&mut body);
            m.insert("uid".into(), json!(validate::new_uid()));
            m.insert("creationTimestamp".into(), json!(validate::now_rfc3339()));
            for k in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
                "selfLink",
            ] {
                m.remove(k);
            }
            if res.generation {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
            if applied.is_none() {
                m.remove("managedFields");
            }
        }
        if applied.is_none() && !opts.manager.is_empty() {
            // the creator owns what it sent, with the defaults, but not
            // what the server's strategy sets (status, namespace finalizers)
            // fields are owned as the request's version has them
            let mut seen = if loc.res.is_events_v1() {
                super::events::core_to_v1(&body)
            } else {
                body.clone()
            };
            if let Some(m) = seen.as_object_mut() {
                if res.status {
                    m.remove("status");
                }
                if res.group.is_empty() && res.plural == "namespaces" {
                    m.remove("spec");
                    m.remove("status");
                }
            }
            let mut owned = seen.clone();
            apply::record_update(
                &json!({}),
                &mut owned,
                &opts.manager,
                if res.custom {
                    Lists::custom(res.schemas.get(&loc.version).map(|s| s.as_ref()))
                } else {
                    Lists::builtin()
                },
                &res.api_version(&loc.version),
                "",
            );
            if let Some(mf) = owned.pointer("/metadata/managedFields").cloned() {
                meta_mut(&mut body).insert("managedFields".into(), mf);
            }
        }
        if res.group.is_empty() && res.plural == "pods" {
            defaults::pod_admission(&mut body);
        }
        if res.group == "batch" && res.plural == "jobs" {
            let uid = meta_str(&body, "uid").unwrap_or("").to_string();
            defaults::job_selector(&mut body, &uid);
        }
        if res.group == "apiextensions.k8s.io" {
            let info = crd::resource_of(&body)?;
            body["status"] = crd::initial_status(&body);
            if !opts.dry_run
                && let Ok(mut reg) = self.registry.write()
            {
                reg.insert(info);
            }
        }
        if opts.dry_run {
            return Ok(Reply {
                code: 201,
                body: self.view(loc, &body),
                warnings,
            });
        }
        let change = w.put(&loc.key, body);
        if res.group == "apiextensions.k8s.io" {
            // the new resource's watch cache starts here: a watch of it
            // from before is 410, as on a real server (whose cache starts
            // when the resource is first served, before any object of it)
            if let Ok(info) = crd::resource_of(&change.obj) {
                w.start_cache(&info.key());
            }
        }
        if loc.key.as_ref() == NS_KEY {
            self.kcm
                .push(super::work::Work::NamespaceCreated(name.clone()));
        }
        if res.group == "apiextensions.k8s.io" {
            self.kcm.push(super::work::Work::Establish(name.clone()));
        }
        Ok(Reply {
            code: 201,
            body: self.view(loc, &change.obj),
            warnings,
        })
    }

    pub(super) fn kind_defaults(&self, res: &ResourceInfo, body: &mut Value) {
        match (res.group.as_str(), res.plural.as_str()) {
            ("", "namespaces") => {
                let name = meta_str(body, "name").unwrap_or("").to_string();
                let m = meta_mut(body);
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
                if body.pointer("/spec/finalizers").is_none() {
                    body["spec"] = json!({"finalizers": ["kubernetes"]});
                }
                body["status"] = json!({"phase": "Active"});
            }
            ("", "pods") => {
                defaults::pod(body);
                defaults::pod_only(body);
                defaults::pod_conditions(body);
            }
            ("", "nodes") => defaults::node(body),
            ("batch", "jobs") => defaults::job(body),
            ("", "secrets") => {
                if let Some(m) = body.as_object_mut() {
                    m.entry("type").or_insert(json!("Opaque"));
                }
            }
            _ => {}
        }
    }

    /// PUT: replace (optimistic concurrency on `metadata.resourceVersion`).
    pub fn update(&self, loc: &Loc, mut body: Value, opts: &WriteOpts) -> Result<Reply, ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        if loc.sub.as_deref() == Some("scale") {
            let replicas = body.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
            let rv = meta_str(&body, "resourceVersion").map(str::to_string);
            return self.set_scale(loc, replicas, rv, opts);
        }
        self.normalise(loc, &mut body)?;
        if let Some(n) = meta_str(&body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let mut w = self.store.write();
        let old = match w.get(&loc.key, loc.ns_str(), &name) {
            Some(o) => o,
            None if loc.sub.is_none() && create_on_update(&loc.res) => {
                meta_mut(&mut body).insert("name".into(), json!(name));
                let collection = Loc {
                    name: None,
                    ..loc.clone()
                };
                return self.create_locked(&mut w, &collection, body, opts, None);
            }
            None => return Err(ApiError::not_found(loc.target(&name))),
        };
        match meta_str(&body, "resourceVersion").filter(|s| !s.is_empty()) {
            Some(rv) if Some(rv) != meta_str(&old, "resourceVersion") => {
                return Err(ApiError::conflict(
                    loc.target(&name),
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            Some(_) => {}
            None if loc.res.unconditional_update => {}
            None => {
                // this one names the resource, not the kind
                return Err(ApiError::invalid(
                    &loc.res.group,
                    &loc.res.plural,
                    &name,
                    vec![Cause {
                        reason: "FieldValueInvalid",
                        field: "metadata.resourceVersion".into(),
                        message: "Invalid value: 0: must be specified for an update".into(),
                    }],
                ));
            }
        }
        self.commit_update(&mut w, loc, &old, body, opts, false)
    }

    /// PATCH: merge, JSON, strategic (built-ins only) or apply.
    pub fn patch(
        &self,
        loc: &Loc,
        pt: PatchType,
        raw: &[u8],
        opts: &WriteOpts,
    ) -> Result<Reply, ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        if pt == PatchType::Apply && !opts.explicit_manager {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause {
                    reason: "FieldValueRequired",
                    field: "fieldManager".into(),
                    message: "Required value: is required for apply patch".into(),
                }],
            ));
        }
        let patch_body: Value = match pt {
            PatchType::Apply => parse_yaml_or_json(raw)?,
            _ => serde_json::from_slice(raw)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
        };
        if pt == PatchType::Apply
            && let Some(n) = meta_str(&patch_body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        if pt == PatchType::Strategic && loc.res.custom {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
            ));
        }
        if loc.sub.as_deref() == Some("scale") {
            let mut scale = self.get(loc)?.body;
            match pt {
                PatchType::Json => patch::json(&mut scale, &patch_body)?,
                _ => patch::merge(&mut scale, &patch_body),
            }
            let replicas = scale.pointer("/spec/replicas").cloned().unwrap_or(json!(0));
            return self.set_scale(loc, replicas, None, opts);
        }
        let mut w = self.store.write();
        let old = match w.get(&loc.key, loc.ns_str(), &name) {
            Some(o) => o,
            None if pt == PatchType::Apply && loc.sub.is_none() => {
                if opts.manager.is_empty() {
                    return Err(ApiError::bad_request(
                        "PATCH requests with apply must have a fieldManager",
                    ));
                }
                let mut cfg = patch_body.clone();
                self.normalise(loc, &mut cfg)?;
                let skeleton = json!({"apiVersion": cfg["apiVersion"].clone(), "kind": cfg["kind"].clone(), "metadata": {"name": name}});
                let req = self.apply_request(loc, &patch_body, opts);
                let mut obj = apply::apply(&skeleton, &req)
                    .map_err(|c| ApiError::apply_conflict(loc.target(&name), &c))?;
                self.normalise(loc, &mut obj)?;
                return self.create_locked(&mut w, loc, obj, opts, Some(&patch_body));
            }
            None => return Err(ApiError::not_found(loc.target(&name))),
        };
        let view = self.view(loc, &old);
        let candidate = match pt {
            PatchType::Merge => {
                let mut v = view;
                patch::merge(&mut v, &patch_body);
                v
            }
            PatchType::Json => {
                let mut v = view;
                patch::json(&mut v, &patch_body)?;
                v
            }
            PatchType::Strategic => {
                let mut v = view;
                patch::strategic(&mut v, &patch_body)?;
                v
            }
            PatchType::Apply => {
                if opts.manager.is_empty() {
                    return Err(ApiError::bad_request(
                        "PATCH requests with apply must have a fieldManager",
                    ));
                }
                let mut check = patch_body.clone();
                self.normalise(loc, &mut check)?;
                let req = self.apply_request(loc, &patch_body, opts);
                apply::apply(&view, &req)
                    .map_err(|c| ApiError::apply_conflict(loc.target(&name), &c))?
            }
        };
        let mut candidate = candidate;
        if !candidate.is_object() {
            return Err(ApiError::bad_request("the patch produced a non-object"));
        }
        if let Some(rv) = meta_str(&candidate, "resourceVersion")
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                loc.target(&name),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        self.normalise(loc, &mut candidate)?;
        self.commit_update(&mut w, loc, &old, candidate, opts, pt == PatchType::Apply)
    }

    pub(super) fn apply_request<'a>(
        &self,
        loc: &'a Loc,
        config: &'a Value,
        opts: &'a WriteOpts,
    ) -> ApplyRequest<'a> {
        let section = match (loc.sub.as_deref(), loc.res.status) {
            (Some("status"), _) => Section::Status,
            (_, true) => Section::Main,
            _ => Section::All,
        };
        ApplyRequest {
            config,
            manager: &opts.manager,
            force: opts.force,
            lists: if loc.res.custom {
                Lists::custom(loc.res.schemas.get(&loc.version).map(|s| s.as_ref()))
            } else {
                Lists::builtin()
            },
            section,
            api_version: loc.res.api_version(&loc.version),
            subresource: if section == Section::Status {
                "status"
            } else {
                ""
            },
        }
    }

    pub(super) fn set_scale(
        &self,
        loc: &Loc,
        replicas: Value,
        rv: Option<String>,
        opts: &WriteOpts,
    ) -> Result<Reply, ApiError> {
        let Some(paths) = loc.res.scale.clone() else {
            return Err(ApiError::unknown_path("scale"));
        };
        let name = loc.name.clone().unwrap_or_default();
        let mut w = self.store.write();
        let old = w
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        if let Some(rv) = rv.filter(|r| !r.is_empty())
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                loc.target(&name),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut new = (*old).clone();
        let ptr = paths.spec_replicas.replace('.', "/");
        let mut cur = &mut new;
        let segs: Vec<&str> = ptr.split('/').filter(|s| !s.is_empty()).collect();
        for (i, seg) in segs.iter().enumerate() {
            if i + 1 == segs.len() {
                cur[*seg] = replicas.clone();
                break;
            }
            if !cur.get(*seg).is_some_and(Value::is_object) {
                cur[*seg] = json!({});
            }
            cur = &mut cur[*seg];
        }
        let main = Loc {
            sub: None,
            ..loc.clone()
        };
        let reply = self.commit_update(&mut w, &main, &old, new, opts, false)?;
        Ok(Reply::ok(self.scale_of(loc, &reply.body)))
    }

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

/// The pod QoS class from its containers' requests and limits (cpu and
/// memory), as the real server computes it on create.
/// Whether a PUT to a missing object creates it: the kinds whose real
/// registry strategy says `AllowCreateOnUpdate() == true` among those
/// served (Leases, Events in both groups, Services; also Endpoints and
/// LimitRanges, which are not served).
fn create_on_update(res: &ResourceInfo) -> bool {
    matches!(
        (res.group.as_str(), res.plural.as_str()),
        ("coordination.k8s.io", "leases")
            | ("", "events")
            | ("events.k8s.io", "events")
            | ("", "services")
    )
}

pub(super) fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in containers {
        for r in ["cpu", "memory"] {
            let req = c.pointer(&format!("/resources/requests/{r}"));
            let lim = c.pointer(&format!("/resources/limits/{r}"));
            any |= req.is_some() || lim.is_some();
            // requests default to limits when only limits are given
            if lim.is_none() || req.is_some_and(|q| Some(q) != lim) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Whether a pod update changes only the mutable parts of the spec:
/// container images, `activeDeadlineSeconds`, tolerations (additions),
/// `terminationGracePeriodSeconds` and `schedulingGates` (removals).
pub(super) fn pod_spec_update_allowed(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.get("spec"), new.get("spec")) else {
        return old.get("spec") == new.get("spec");
    };
    let mut n = n.clone();
    for list in ["containers", "initContainers"] {
        if let (Some(oc), Some(nc)) = (
            o.get(list).and_then(Value::as_array),
            n.get_mut(list).and_then(Value::as_array_mut),
        ) && oc.len() == nc.len()
        {
            for (a, b) in oc.iter().zip(nc.iter_mut()) {
                match a.get("image") {
                    Some(img) => b["image"] = img.clone(),
                    None => {
                        if let Some(m) = b.as_object_mut() {
                            m.remove("image");
                        }
                    }
                }
            }
        }
    }
    let old_tol = o
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_tol = n
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !old_tol.iter().all(|t| new_tol.contains(t)) {
        return false;
    }
    let old_gates = o
        .get("schedulingGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_gates = n
        .get("schedulingGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !new_gates.iter().all(|g| old_gates.contains(g)) {
        return false;
    }
    if let Some(m) = n.as_object_mut() {
        for k in [
            "activeDeadlineSeconds",
            "terminationGracePeriodSeconds",
            "tolerations",
            "schedulingGates",
        ] {
            match o.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
    }
    n == *o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_spec_mutability() {
        let old = json!({"spec": {"nodeName": "", "containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "x"}]}});
        let image = json!({"spec": {"nodeName": "", "containers": [{"name": "c", "image": "b"}], "tolerations": [{"key": "x"}, {"key": "y"}]}});
        assert!(pod_spec_update_allowed(&old, &image));
        let node = json!({"spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "a"}], "tolerations": [{"key": "x"}]}});
        assert!(!pod_spec_update_allowed(&old, &node));
        let fewer = json!({"spec": {"nodeName": "", "containers": [{"name": "c", "image": "a"}]}});
        assert!(!pod_spec_update_allowed(&old, &fewer));
    }

    #[test]
    fn qos_classes() {
        let pod = |res: Value| json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": res}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&pod(json!({"requests": {"cpu": "1"}}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
            )),
            "Burstable"
        );
    }
}
