//! The verbs: create, get, list, update, patch, delete and deletecollection,
//! with the semantics of the real server (optimistic concurrency, status
//! subresource isolation, generation, no-op writes, finalizers, owner
//! garbage collection, schema admission of custom resources). HTTP and the
//! handle's direct path both call these.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::apply::{self, ApplyRequest, Section};
use super::crd;
use super::errors::{ApiError, Cause, Target};
use super::events;
use super::patch::{self, PatchType};
use super::resources::{ResourceInfo, StatusOnCreate};
use super::schema;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
use super::store::{ChangeKind, Inner};
use super::validate;

/// Which object (or collection) a request addresses.
#[derive(Debug, Clone)]
pub struct Loc {
    /// The resource.
    pub res: Arc<ResourceInfo>,
    /// Storage key `group/plural`.
    pub key: Arc<str>,
    /// Version used in the request.
    pub version: String,
    /// Namespace from the path.
    pub ns: Option<String>,
    /// Name from the path.
    pub name: Option<String>,
    /// Subresource from the path.
    pub sub: Option<String>,
}

impl Loc {
    /// Addresses `res` at `version`.
    pub fn new(
        res: Arc<ResourceInfo>,
        version: &str,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
    ) -> Self {
        Self {
            key: Arc::from(res.key().as_str()),
            res,
            version: version.to_string(),
            ns: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        }
    }

    fn ns_str(&self) -> &str {
        if self.res.namespaced {
            self.ns.as_deref().unwrap_or("")
        } else {
            ""
        }
    }

    fn target<'a>(&'a self, name: &'a str) -> Target<'a> {
        Target {
            group: &self.res.group,
            plural: &self.res.plural,
            name,
        }
    }
}

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// Field manager (`fieldManager` or the User-Agent up to the first `/`).
    pub manager: String,
    /// `force=true` for apply.
    pub force: bool,
    /// `fieldValidation=Strict`: unknown fields are a 400.
    pub strict: bool,
    /// `dryRun=All`: validate but do not store.
    pub dry_run: bool,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub rv: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

impl DeleteOpts {
    /// Reads a `DeleteOptions` body (kube sends one with every delete).
    pub fn merge_body(&mut self, body: &Value) {
        if let Some(p) = body.get("propagationPolicy").and_then(Value::as_str) {
            self.propagation = Some(p.to_string());
        }
        if body.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            self.propagation = Some("Orphan".into());
        }
        if let Some(g) = body.get("gracePeriodSeconds").and_then(Value::as_i64) {
            self.grace = Some(g);
        }
        if let Some(u) = body.pointer("/preconditions/uid").and_then(Value::as_str) {
            self.uid = Some(u.to_string());
        }
        if let Some(r) = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            self.rv = Some(r.to_string());
        }
        if body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            self.dry_run = true;
        }
    }
}

/// List parameters.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0 = no limit).
    pub limit: usize,
    /// `continue` token.
    pub cont: Option<String>,
    /// `resourceVersion`.
    pub rv: Option<String>,
    /// `resourceVersionMatch`.
    pub rv_match: Option<String>,
}

/// A successful answer: status code, body, `Warning` headers.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub code: u16,
    /// JSON body.
    pub body: Value,
    /// Warning texts.
    pub warnings: Vec<String>,
}

impl Reply {
    fn ok(body: Value) -> Self {
        Self {
            code: 200,
            body,
            warnings: vec![],
        }
    }
}

fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

fn meta_str<'a>(obj: &'a Value, k: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(k)).and_then(Value::as_str)
}

/// The content outside metadata and status: its change moves `generation`.
fn spec_part(obj: &Value) -> Value {
    match obj {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => Value::Null,
    }
}

const NS_KEY: &str = "/namespaces";

impl Shared {
    /// An object as seen through `loc.version` (only `apiVersion` differs:
    /// versions of a CRD share one schema-less conversion, `None` strategy).
    pub fn view(&self, loc: &Loc, obj: &Value) -> Value {
        let mut v = if loc.res.is_events_v1() {
            events::core_to_v1(obj)
        } else {
            obj.clone()
        };
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "apiVersion".into(),
                json!(loc.res.api_version(&loc.version)),
            );
            m.insert("kind".into(), json!(loc.res.kind));
        }
        v
    }

    fn storage_api_version(res: &ResourceInfo) -> String {
        res.api_version(res.storage_version())
    }

    /// Checks kind/apiVersion of a body and stamps the storage ones.
    fn normalise(&self, loc: &Loc, body: &mut Value) -> Result<(), ApiError> {
        let Some(m) = body.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        };
        let want_av = loc.res.api_version(&loc.version);
        if let Some(av) = m.get("apiVersion").and_then(Value::as_str)
            && av != want_av
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        if let Some(k) = m.get("kind").and_then(Value::as_str)
            && k != loc.res.kind
            && !k.is_empty()
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                loc.res.kind
            )));
        }
        m.insert(
            "apiVersion".into(),
            json!(Self::storage_api_version(&loc.res)),
        );
        m.insert("kind".into(), json!(loc.res.kind));
        if !m.get("metadata").is_some_and(Value::is_object) {
            m.insert("metadata".into(), json!({}));
        }
        if loc.res.is_events_v1() {
            *body = events::v1_to_core(body);
        }
        Ok(())
    }

    /// Admission shared by create and update: micro-times, names, schema of
    /// custom resources (defaults, pruning, validation), kind-specific rules.
    fn admit(
        &self,
        loc: &Loc,
        obj: &mut Value,
        opts: &WriteOpts,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let res = &loc.res;
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        if let Some(msg) = validate::check_micro_times(&res.group, &res.plural, obj) {
            return Err(ApiError::bad_request(msg));
        }
        let mut causes: Vec<Cause> = Vec::new();
        if let Some(c) = validate::check_name(&res.plural, &name) {
            causes.push(c);
        }
        if let Some(schema) = res.schemas.get(&loc.version) {
            let out = schema::apply(schema, obj);
            if !out.pruned.is_empty() {
                if opts.strict {
                    return Err(ApiError::bad_request(format!(
                        "strict decoding error: {}",
                        out.pruned
                            .iter()
                            .map(|p| format!("unknown field \"{p}\""))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                warnings.extend(out.pruned.iter().map(|p| format!("unknown field \"{p}\"")));
            }
            causes.extend(out.causes);
        }
        if res.group.is_empty() && res.plural == "pods" {
            match obj.pointer("/spec/containers").and_then(Value::as_array) {
                Some(cs) if !cs.is_empty() => {
                    for (i, c) in cs.iter().enumerate() {
                        for f in ["name", "image"] {
                            if c.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                                causes.push(Cause {
                                    reason: "FieldValueRequired",
                                    field: format!("spec.containers[{i}].{f}"),
                                    message: "Required value".into(),
                                });
                            }
                        }
                    }
                }
                _ => causes.push(Cause {
                    reason: "FieldValueRequired",
                    field: "spec.containers".into(),
                    message: "Required value".into(),
                }),
            }
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&res.group, &res.kind, &name, causes));
        }
        Ok(())
    }

    /// GET one object (or a `/scale`).
    pub fn get(&self, loc: &Loc) -> Result<Reply, ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        let obj = self
            .store
            .read()
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        if loc.sub.as_deref() == Some("scale") {
            return Ok(Reply::ok(self.scale_of(loc, &obj)));
        }
        Ok(Reply::ok(self.view(loc, &obj)))
    }

    fn scale_of(&self, loc: &Loc, obj: &Value) -> Value {
        let paths = loc.res.scale.clone();
        let at = |p: &str| obj.pointer(&p.replace('.', "/")).cloned();
        let (spec, status, sel) = match &paths {
            Some(p) => (
                at(&p.spec_replicas).unwrap_or(json!(0)),
                at(&p.status_replicas).unwrap_or(json!(0)),
                p.label_selector.as_deref().and_then(at),
            ),
            None => (json!(0), json!(0), None),
        };
        let mut status = json!({"replicas": status});
        if let Some(s) = sel {
            status["selector"] = s;
        }
        json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": meta_str(obj, "name"), "namespace": meta_str(obj, "namespace"),
                "uid": meta_str(obj, "uid"), "resourceVersion": meta_str(obj, "resourceVersion"),
                "creationTimestamp": meta_str(obj, "creationTimestamp")},
            "spec": {"replicas": spec}, "status": status,
        })
    }

    /// LIST with selectors, paging and resourceVersion semantics.
    pub async fn list(&self, loc: &Loc, q: &ListQuery) -> Result<Reply, ApiError> {
        if let Some(rv) = q.rv.as_deref().filter(|r| !r.is_empty() && *r != "0") {
            let want: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
            let (cur, floor) = {
                let r = self.store.read();
                (r.rv(), r.floor())
            };
            if want > cur
                && !self
                    .store
                    .wait_for_rv(want, std::time::Duration::from_secs(3))
                    .await
            {
                return Err(ApiError::too_large_rv(want, self.store.read().rv()));
            }
            if q.rv_match.as_deref() == Some("Exact") && want != cur {
                if want < floor {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {want} ({floor})"
                    )));
                }
                return self.list_exact(loc, q, want);
            }
        }
        let (rv, items, offset) = if let Some(tok) = q.cont.as_deref().filter(|t| !t.is_empty()) {
            let (id, offset) = parse_token(tok)
                .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
            let (rv, items) = self.store.snapshot(id).ok_or_else(|| {
                ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
            })?;
            (rv, items, offset)
        } else {
            let r = self.store.read();
            let items = self.select(&r, loc, q);
            (r.rv(), Arc::new(items), 0)
        };
        Ok(Reply::ok(self.page(loc, q, rv, items, offset)))
    }

    fn select(&self, r: &Inner, loc: &Loc, q: &ListQuery) -> Vec<Arc<Value>> {
        let ns = if loc.res.namespaced {
            loc.ns.as_deref()
        } else {
            None
        };
        if let Some(name) = q.fields.pinned_name() {
            let found = match ns {
                Some(ns) => r.get(&loc.key, ns, name).into_iter().collect::<Vec<_>>(),
                None => r
                    .iter(&loc.key, None)
                    .filter(|((_, n), _)| n == name)
                    .map(|(_, o)| o.clone())
                    .collect(),
            };
            return found
                .into_iter()
                .filter(|o| q.labels.matches(o) && q.fields.matches(o))
                .collect();
        }
        r.iter(&loc.key, ns)
            .filter(|(_, o)| q.labels.matches(o) && q.fields.matches(o))
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// A list at an older resourceVersion, rebuilt by undoing later history.
    fn list_exact(&self, loc: &Loc, q: &ListQuery, want: u64) -> Result<Reply, ApiError> {
        let r = self.store.read();
        let ns = if loc.res.namespaced {
            loc.ns.clone()
        } else {
            None
        };
        let mut objs: std::collections::BTreeMap<(String, String), Arc<Value>> = r
            .iter(&loc.key, ns.as_deref())
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for c in r.history_since(want).iter().rev() {
            if *c.res != *loc.key || ns.as_deref().is_some_and(|n| n != c.ns) {
                continue;
            }
            let name = meta_str(&c.obj, "name").unwrap_or("").to_string();
            let k = (c.ns.clone(), name);
            match (&c.kind, &c.old) {
                (ChangeKind::Added, _) => {
                    objs.remove(&k);
                }
                (_, Some(old)) => {
                    objs.insert(k, old.clone());
                }
                _ => {}
            }
        }
        let items: Vec<Arc<Value>> = objs
            .into_values()
            .filter(|o| q.labels.matches(o) && q.fields.matches(o))
            .collect();
        Ok(Reply::ok(self.page(loc, q, want, Arc::new(items), 0)))
    }

    fn page(
        &self,
        loc: &Loc,
        q: &ListQuery,
        rv: u64,
        items: Arc<Vec<Arc<Value>>>,
        offset: usize,
    ) -> Value {
        let total = items.len();
        let end = if q.limit > 0 {
            (offset + q.limit).min(total)
        } else {
            total
        };
        let page: Vec<Value> = items
            .get(offset.min(total)..end)
            .unwrap_or(&[])
            .iter()
            .map(|o| {
                let mut v = self.view(loc, o);
                if !loc.res.custom
                    && let Some(m) = v.as_object_mut()
                {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                v
            })
            .collect();
        let mut md = json!({"resourceVersion": rv.to_string()});
        if end < total {
            let id = if offset == 0 {
                self.store.pin(rv, items.to_vec())
            } else {
                q.cont
                    .as_deref()
                    .and_then(parse_token)
                    .map(|(id, _)| id)
                    .unwrap_or(0)
            };
            md["continue"] = json!(format!("{rv}.{id}.{end}"));
            md["remainingItemCount"] = json!(total - end);
        }
        json!({
            "kind": format!("{}List", loc.res.kind),
            "apiVersion": loc.res.api_version(&loc.version),
            "metadata": md,
            "items": page,
        })
    }

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

    fn create_locked(
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
        if res.namespaced && w.get(NS_KEY, "", &ns).is_none() {
            return Err(ApiError::not_found(Target {
                group: "",
                plural: "namespaces",
                name: &ns,
            }));
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
                body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
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
        if res.group == "apiextensions.k8s.io" {
            let info = crd::resource_of(&body)?;
            body["status"] = crd::established_status(&body);
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
        Ok(Reply {
            code: 201,
            body: self.view(loc, &change.obj),
            warnings,
        })
    }

    fn kind_defaults(&self, res: &ResourceInfo, body: &mut Value) {
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
                if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("restartPolicy").or_insert(json!("Always"));
                    spec.entry("schedulerName")
                        .or_insert(json!("default-scheduler"));
                    spec.entry("terminationGracePeriodSeconds")
                        .or_insert(json!(30));
                    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
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
        let old = w
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
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
                return Err(ApiError::invalid(
                    &loc.res.group,
                    &loc.res.kind,
                    &name,
                    vec![Cause {
                        reason: "FieldValueInvalid",
                        field: "metadata.resourceVersion".into(),
                        message: "Invalid value: 0x0: must be specified for an update".into(),
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
        let patch_body: Value = match pt {
            PatchType::Apply => parse_yaml_or_json(raw)?,
            _ => serde_json::from_slice(raw)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
        };
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

    fn apply_request<'a>(
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
            custom: loc.res.custom,
            section,
            api_version: "",
            subresource: if section == Section::Status {
                "status"
            } else {
                ""
            },
        }
    }

    fn set_scale(
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
    fn commit_update(
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
                Some(s) => next["status"] = s.clone(),
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
        if om_terminating(old) {
            let old_f = finalizers(old);
            if finalizers(&cand).iter().any(|f| !old_f.contains(f)) {
                return Err(ApiError::invalid(&res.group, &res.kind, &name, vec![Cause { reason: "FieldValueForbidden", field: "metadata.finalizers".into(), message: "Forbidden: no new finalizers can be added if the object is being deleted".into() }]));
            }
        }
        if !applied && !opts.manager.is_empty() {
            apply::record_update(
                old,
                &mut cand,
                &opts.manager,
                res.custom,
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
        if om_terminating(&cand) && finalizers(&cand).is_empty() {
            let change =
                self.finalize_removal(w, &loc.key, loc.ns_str(), &name, "Background", Some(cand));
            let body = change.map(|o| self.view(loc, &o)).unwrap_or(Value::Null);
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

    /// Removes an object for good and collects its dependents; returns its
    /// last state.
    fn finalize_removal(
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
        if key.as_ref() == "apiextensions.k8s.io/customresourcedefinitions" {
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
        if key.as_ref() == NS_KEY {
            self.empty_namespace(w, name);
        }
        if !uid.is_empty() && policy != "Orphan" {
            self.collect_dependents(w, &uid);
        }
        Some(change.obj.clone())
    }

    fn empty_namespace(&self, w: &mut Inner, ns: &str) {
        let reg = self.registry_snapshot();
        for res in reg
            .all()
            .filter(|r| r.namespaced && r.storage_alias.is_none())
        {
            let key: Arc<str> = Arc::from(res.key().as_str());
            let names: Vec<String> = w
                .iter(&key, Some(ns))
                .map(|((_, n), _)| n.clone())
                .collect();
            for n in names {
                let _ = self.delete_locked(w, &key, ns, &n, &DeleteOpts::default());
            }
        }
    }

    /// Background garbage collection: dependents whose last owner is gone are
    /// deleted; references to the gone owner are removed otherwise.
    fn collect_dependents(&self, w: &mut Inner, owner_uid: &str) {
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

    fn orphan_dependents(&self, w: &mut Inner, owner_uid: &str) {
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
        if loc.sub.is_some() {
            return Err(ApiError::method_not_allowed(
                "DELETE is not supported on subresources",
            ));
        }
        let mut w = self.store.write();
        let old = w
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                loc.target(&name),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.rv
            && Some(rv.as_str()) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                loc.target(&name),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or("")
                ),
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

    fn deleted_body(&self, loc: &Loc, obj: &Value) -> Value {
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
    fn delete_locked(
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
        let uid = meta_str(&old, "uid").unwrap_or("").to_string();
        let policy = opts
            .propagation
            .clone()
            .unwrap_or_else(|| "Background".into());
        match policy.as_str() {
            "Orphan" => self.orphan_dependents(w, &uid),
            "Foreground" => self.collect_dependents(w, &uid),
            "Background" => {}
            other => {
                return Err(ApiError::bad_request(format!(
                    "unsupported propagationPolicy {other:?}"
                )));
            }
        }
        let is_pod = key.as_ref() == "/pods";
        let bound = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let hold = is_pod && self.opts.hold_pod_deletion && bound && opts.grace != Some(0);
        if !finalizers(&old).is_empty() || hold {
            if om_terminating(&old) {
                return Ok((old, false));
            }
            let mut d = (*old).clone();
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
            let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
            let m = meta_mut(&mut d);
            m.insert(
                "deletionTimestamp".into(),
                json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            let change = w.put(key, d);
            return Ok((change.obj.clone(), false));
        }
        let last = self
            .finalize_removal(w, key, ns, name, &policy, None)
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

    /// `pods/binding` (scheduling) and `pods/eviction` (delete).
    fn pod_subresource_post(&self, loc: &Loc, body: &Value) -> Result<Reply, ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        if loc.sub.as_deref() == Some("eviction") {
            let mut d = DeleteOpts::default();
            if let Some(o) = body.get("deleteOptions") {
                d.merge_body(o);
            }
            let main = Loc {
                sub: None,
                ..loc.clone()
            };
            self.delete(&main, &d)?;
            return Ok(Reply {
                code: 201,
                body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                warnings: vec![],
            });
        }
        let node = body
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                &name,
                vec![Cause {
                    reason: "FieldValueRequired",
                    field: "target.name".into(),
                    message: "Required value".into(),
                }],
            ));
        }
        let mut w = self.store.write();
        let old = w
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        if let Some(cur) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                loc.target(&name),
                &format!("pod {name} is already assigned to node \"{cur}\""),
            ));
        }
        let mut p = (*old).clone();
        p["spec"]["nodeName"] = json!(node);
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": validate::now_rfc3339()});
        let conds = p["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut conds: Vec<Value> = conds
            .into_iter()
            .filter(|c| c.get("type") != Some(&json!("PodScheduled")))
            .collect();
        conds.push(cond);
        p["status"]["conditions"] = Value::Array(conds);
        w.put(&loc.key, p);
        Ok(Reply {
            code: 201,
            body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            warnings: vec![],
        })
    }

    /// `pods/log`: the text set through the handle; 204 for a pod never
    /// scheduled. Returns (status, text).
    pub fn pod_log(
        &self,
        loc: &Loc,
        container: Option<&str>,
        tail: Option<usize>,
    ) -> Result<(u16, String), ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        let pod = self
            .store
            .read()
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        let names: Vec<String> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let container = match container {
            Some(c) => {
                if !names.iter().any(|n| n == c) {
                    return Err(ApiError::bad_request(format!(
                        "container {c} is not valid for pod {name}"
                    )));
                }
                c.to_string()
            }
            None if names.len() == 1 => names[0].clone(),
            None => {
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                )));
            }
        };
        if pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Ok((204, String::new()));
        }
        let text = self
            .pod_logs
            .lock()
            .ok()
            .and_then(|g| {
                g.get(&(loc.ns_str().to_string(), name.clone(), container))
                    .cloned()
            })
            .unwrap_or_default();
        let text = match tail {
            Some(n) => {
                let lines: Vec<&str> = text.lines().collect();
                let start = lines.len().saturating_sub(n);
                let mut t = lines[start..].join("\n");
                if !t.is_empty() {
                    t.push('\n');
                }
                t
            }
            None => text,
        };
        Ok((200, text))
    }
}

fn finalizers(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn om_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn parse_token(tok: &str) -> Option<(u64, usize)> {
    let mut it = tok.split('.');
    let _rv: u64 = it.next()?.parse().ok()?;
    let id = it.next()?.parse().ok()?;
    let off = it.next()?.parse().ok()?;
    Some((id, off))
}

/// Parses an apply body: YAML (JSON is YAML too).
pub fn parse_yaml_or_json(raw: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(raw) {
        return Ok(v);
    }
    let s = std::str::from_utf8(raw)
        .map_err(|e| ApiError::bad_request(format!("apply body is not UTF-8: {e}")))?;
    serde_saphyr::from_str::<Value>(s)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}
