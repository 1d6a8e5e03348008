//! The scenarios: what rebound's controller, `kubectl` and the simulated
//! actors ask an API server, one area per module. Each runs in its own
//! namespace (`cf-<name>`) and names its cluster-scoped objects after
//! itself, so the recorder runs them all on one real server.

use std::path::Path;

use serde_json::{Value, json};

use super::scenario::Scenario;

mod crds;
mod discovery;
mod lifecycle;
mod objects;
mod pods;
mod reads;
mod refusals;
mod watches;
mod writes;

/// Every scenario. `shared` is the `../shared` folder (the real job CRDs);
/// without it the scenarios that register them are left out.
pub fn all(shared: Option<&Path>) -> Vec<Scenario> {
    let mut v = Vec::new();
    v.extend(discovery::all());
    v.extend(writes::all());
    v.extend(reads::all());
    v.extend(watches::all());
    v.extend(lifecycle::all());
    v.extend(objects::all());
    v.extend(pods::all());
    v.extend(crds::all(shared));
    v.extend(refusals::all());
    v
}

/// A minimal ConfigMap.
pub(super) fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

/// A one-container pod as the simulated job operators make them.
pub(super) fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}})
}

/// `/api/v1/namespaces/{ns}/<plural>`.
pub(super) fn core(plural: &str) -> String {
    format!("/api/v1/namespaces/{{ns}}/{plural}")
}

/// Content types.
pub(super) const MERGE: &str = "application/merge-patch+json";
pub(super) const JSONPATCH: &str = "application/json-patch+json";
pub(super) const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub(super) const APPLY: &str = "application/apply-patch+yaml";
