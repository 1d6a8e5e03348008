//! The `PartialObjectMetadata` rendering that metadata-only clients ask
//! for (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`),
//! e.g. `kube::runtime::metadata_watcher`: only `metadata` goes on the wire.

use serde_json::{Value, json};

/// Whether an `Accept` header asks for metadata only.
pub fn wants_metadata(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

/// One object reduced to its metadata.
pub fn partial(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// A list reduced to the metadata of its items.
pub fn partial_list(list: &Value) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(partial).collect())
        .unwrap_or_default();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list.get("metadata").cloned().unwrap_or(json!({})),
        "items": items,
    })
}
