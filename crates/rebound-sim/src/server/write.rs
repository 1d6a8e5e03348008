//! Update (PUT), patch of every type, server-side apply and `/scale`
//! writes; each ends in the commit step (`commit`).

use serde_json::{Value, json};

use super::apply::{self, ApplyRequest, Lists, Section};
use super::errors::{ApiError, Cause};
use super::ops::{Loc, Reply, WriteOpts, meta_mut, meta_str, parse_yaml_or_json};
use super::patch::{self, PatchType};
use super::resources::ResourceInfo;
use super::state::Shared;

impl Shared {
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
}

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
