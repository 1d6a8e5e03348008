//! What every verb shares: the request location (`Loc`), options and
//! answers, the version view of stored objects, body normalisation,
//! admission (names, micro-times, custom resource schemas), and GET. The
//! verbs live in `list`, `write`, `delete` and `pods`; HTTP and the
//! handle's direct path both call them.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::errors::{ApiError, Cause, Target};
use super::events;
use super::kindcheck;
use super::resources::ResourceInfo;
use super::schema;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
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

    pub(super) fn ns_str(&self) -> &str {
        if self.res.namespaced {
            self.ns.as_deref().unwrap_or("")
        } else {
            ""
        }
    }

    pub(super) fn target<'a>(&'a self, name: &'a str) -> Target<'a> {
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
    /// `fieldValidation=Ignore`: unknown fields dropped without a warning.
    pub ignore_unknown: bool,
    /// `fieldManager` was given (apply requires it).
    pub explicit_manager: bool,
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
    pub(super) fn ok(body: Value) -> Self {
        Self {
            code: 200,
            body,
            warnings: vec![],
        }
    }
}

pub(super) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub(super) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub(super) fn meta_str<'a>(obj: &'a Value, k: &str) -> Option<&'a str> {
    meta(obj).and_then(|m| m.get(k)).and_then(Value::as_str)
}

/// The content outside metadata and status: its change moves `generation`.
pub(super) fn spec_part(obj: &Value) -> Value {
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

pub(super) const NS_KEY: &str = "/namespaces";

impl Shared {
    /// An object as seen through `loc.version` (only `apiVersion` differs:
    /// versions of a CRD share one schema-less conversion, `None` strategy).
    pub fn view(&self, loc: &Loc, obj: &Value) -> Value {
        let mut v = if loc.res.is_events_v1() {
            let mut e = events::core_to_v1(obj);
            super::defaults::v1_event_view(&mut e);
            e
        } else {
            obj.clone()
        };
        if loc.res.group.is_empty() && loc.res.plural == "events" {
            super::defaults::core_event_view(&mut v);
        }
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "apiVersion".into(),
                json!(loc.res.api_version(&loc.version)),
            );
            m.insert("kind".into(), json!(loc.res.kind));
        }
        v
    }

    pub(super) fn storage_api_version(res: &ResourceInfo) -> String {
        res.api_version(res.storage_version())
    }

    /// Checks kind/apiVersion of a body and stamps the storage ones.
    pub(super) fn normalise(&self, loc: &Loc, body: &mut Value) -> Result<(), ApiError> {
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
        if !loc.res.custom {
            super::defaults::drop_empty(body);
        }
        if loc.res.group.is_empty() && loc.res.plural == "secrets" {
            super::defaults::secret_string_data(body);
        }
        Ok(())
    }

    /// Admission shared by create and update: micro-times, names, schema of
    /// custom resources (defaults, pruning, validation), kind-specific rules.
    pub(super) fn admit(
        &self,
        loc: &Loc,
        obj: &mut Value,
        opts: &WriteOpts,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let res = &loc.res;
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        if let Some(msg) = validate::check_micro_times(&res.group, &res.plural, obj) {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{v}\" cannot be handled as a {kind}: {msg}",
                kind = res.kind,
                v = loc.version
            )));
        }
        let mut causes: Vec<Cause> = Vec::new();
        if let Some(c) = validate::check_name(&res.plural, &name) {
            causes.push(c);
        }
        causes.extend(validate::check_labels(obj));
        causes.extend(kindcheck::owner_references(obj));
        if !res.custom {
            let unknown = kindcheck::unknown_fields(&res.group, &res.plural, obj);
            if !unknown.is_empty() {
                if opts.strict {
                    let fields = unknown
                        .iter()
                        .map(|p| format!("unknown field \"{p}\""))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(ApiError::bad_request(format!(
                        "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {fields}",
                        kind = res.kind,
                        v = loc.version,
                    )));
                }
                if !opts.ignore_unknown {
                    warnings.extend(unknown.iter().map(|p| format!("unknown field \"{p}\"")));
                }
                kindcheck::drop_fields(obj, &unknown);
            }
        }
        if let Some(schema) = res.schemas.get(&loc.version) {
            let out = schema::apply(schema, obj);
            if !out.pruned.is_empty() {
                if opts.strict {
                    let fields = out
                        .pruned
                        .iter()
                        .map(|p| format!("unknown field \"{p}\""))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(ApiError::bad_request(format!(
                        "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {fields}",
                        kind = res.kind,
                        v = loc.version,
                    )));
                }
                warnings.extend(out.pruned.iter().map(|p| format!("unknown field \"{p}\"")));
            }
            causes.extend(out.causes);
        }
        if loc.key.as_ref() == "/events" {
            // an Event with an eventTime (a "new" one) needs its
            // reporting fields, through either API
            if obj.get("eventTime").is_some_and(|t| !t.is_null()) {
                causes.extend(kindcheck::v1_event_required(obj, loc.res.is_events_v1()));
            }
            if loc.res.is_events_v1() {
                causes.extend(validate::check_v1_event(obj));
            }
            causes.extend(validate::check_event_namespace(obj, loc.ns.as_deref()));
        }
        if res.group.is_empty() && matches!(res.plural.as_str(), "configmaps" | "secrets") {
            causes.extend(validate::check_data_keys(obj));
        }
        if res.group.is_empty() && res.plural == "secrets" {
            causes.extend(validate::check_secret_type(obj));
        }
        if res.group == "coordination.k8s.io" && res.plural == "leases" {
            causes.extend(validate::check_lease(obj));
        }
        if res.group == "batch" && res.plural == "jobs" {
            let rp = obj
                .pointer("/spec/template/spec/restartPolicy")
                .and_then(Value::as_str);
            if !matches!(rp, Some("OnFailure" | "Never")) {
                causes.push(Cause {
                    reason: "FieldValueRequired",
                    field: "spec.template.spec.restartPolicy".into(),
                    message: "Required value: valid values: \"OnFailure\", \"Never\"".into(),
                });
            }
        }
        if res.group.is_empty() && res.plural == "pods" {
            if super::podcheck::bad_quantity(obj) {
                return Err(ApiError::bad_request(format!(
                    "Pod in version \"{}\" cannot be handled as a Pod: {}",
                    loc.version,
                    super::quantity::INVALID
                )));
            }
            causes.extend(super::podcheck::check(obj));
            causes.extend(kindcheck::toleration_effects(obj));
            causes.extend(kindcheck::pod_quantities(obj));
        }
        if res.group.is_empty() && res.plural == "nodes" {
            if kindcheck::node_bad_quantity(obj) {
                return Err(ApiError::bad_request(format!(
                    "Node in version \"{}\" cannot be handled as a Node: {}",
                    loc.version,
                    super::quantity::INVALID
                )));
            }
            causes.extend(kindcheck::node_taints(obj));
            causes.extend(kindcheck::node_quantities(obj));
        }
        if !causes.is_empty() {
            // Events are validated as the core type, whichever API wrote them
            let group = if loc.key.as_ref() == "/events" {
                ""
            } else {
                res.group.as_str()
            };
            return Err(ApiError::invalid(group, &res.kind, &name, causes));
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

    pub(super) fn scale_of(&self, loc: &Loc, obj: &Value) -> Value {
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
}

pub(super) fn finalizers(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(super) fn om_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
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
