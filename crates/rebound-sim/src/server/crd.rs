//! Turning a CustomResourceDefinition into a served resource: names,
//! scope, served versions (storage version first), per-version schema,
//! `/status` and `/scale` subresources and printer columns.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::errors::{ApiError, Cause};
use super::resources::{ResourceInfo, ScalePaths, StatusOnCreate};

/// Storage key of CustomResourceDefinitions.
pub(super) const CRD_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// The finalizer a real server puts on a deleted CRD until its objects are gone.
pub(super) const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn invalid(name: &str, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        name,
        vec![Cause {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: message.into(),
        }],
    )
}

/// Builds the served resource of a CRD, or a 422 naming the bad field.
pub fn resource_of(crd: &Value) -> Result<ResourceInfo, ApiError> {
    let name = s(crd, "/metadata/name");
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let kind = s(crd, "/spec/names/kind");
    if group.is_empty() {
        return Err(invalid(name, "spec.group", "Required value"));
    }
    if plural.is_empty() || kind.is_empty() {
        return Err(invalid(name, "spec.names", "plural and kind are required"));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            name,
            "metadata.name",
            &format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let scope = s(crd, "/spec/scope");
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        _ => {
            return Err(invalid(
                name,
                "spec.scope",
                "Unsupported value: supported values: \"Cluster\", \"Namespaced\"",
            ));
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        return Err(invalid(
            name,
            "spec.versions",
            "Required value: must have exactly one version marked as storage version",
        ));
    }
    let mut served = Vec::new();
    let mut schemas = BTreeMap::new();
    let mut printer_columns = BTreeMap::new();
    let mut status = false;
    let mut scale = None;
    let storage_count = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage_count != 1 {
        return Err(invalid(
            name,
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    }
    for v in &versions {
        let vname = s(v, "/name").to_string();
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            served.insert(0, vname.clone());
        } else {
            served.push(vname.clone());
        }
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            schemas.insert(vname.clone(), Arc::new(schema.clone()));
        }
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            printer_columns.insert(vname.clone(), cols.clone());
        }
        if v.pointer("/subresources/status").is_some() {
            status = true;
        }
        if let Some(sc) = v.pointer("/subresources/scale") {
            scale = Some(ScalePaths {
                spec_replicas: s(sc, "/specReplicasPath").to_string(),
                status_replicas: s(sc, "/statusReplicasPath").to_string(),
                label_selector: sc
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        }
    }
    if served.is_empty() {
        return Err(invalid(
            name,
            "spec.versions",
            "at least one version must be served",
        ));
    }
    let singular = match s(crd, "/spec/names/singular") {
        "" => kind.to_ascii_lowercase(),
        x => x.to_string(),
    };
    Ok(ResourceInfo {
        group: group.into(),
        versions: served,
        plural: plural.into(),
        singular,
        kind: kind.into(),
        namespaced,
        short_names: strings(crd.pointer("/spec/names/shortNames")),
        categories: strings(crd.pointer("/spec/names/categories")),
        status,
        scale,
        pod_extras: false,
        status_on_create: if status {
            StatusOnCreate::Drop
        } else {
            StatusOnCreate::Keep
        },
        status_writes_metadata: false,
        unconditional_update: false,
        return_deleted_object: false,
        generation: true,
        custom: true,
        schemas,
        printer_columns,
        crd_name: Some(name.to_string()),
        storage_alias: None,
    })
}

/// The status the real server reports once a CRD is served.
pub fn established_status(crd: &Value) -> Value {
    let now = super::validate::now_rfc3339();
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let mut names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    if let Some(k) = names
        .get("kind")
        .and_then(Value::as_str)
        .map(str::to_string)
        && names.get("listKind").is_none()
    {
        names["listKind"] = json!(format!("{k}List"));
    }
    if names.get("singular").is_none()
        && let Some(k) = names
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
    {
        names["singular"] = json!(k);
    }
    json!({
        "acceptedNames": names,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now}
        ],
        "storedVersions": storage,
    })
}

/// The status of a CRD just created, before the naming and establishing
/// controllers have looked at it.
pub fn initial_status(crd: &Value) -> Value {
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({"acceptedNames": {"kind": "", "plural": ""}, "storedVersions": storage})
}
