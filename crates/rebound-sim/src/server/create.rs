//! Create (POST): namespace and name checks, generateName, status on
//! create, kind defaults, admission, system metadata, the creator's
//! managed fields, and the controllers' work a new object causes.

use serde_json::{Value, json};

use super::apply::{self, Lists};
use super::crd;
use super::defaults;
use super::errors::{ApiError, Cause, Target};
use super::ops::{Loc, NS_KEY, Reply, WriteOpts, meta_mut, meta_str, om_terminating};
use super::podrules::qos_class;
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
}
