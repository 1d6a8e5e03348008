//! Schemas schemars cannot derive the way the API server needs them.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object kept as it is written (`x-kubernetes-preserve-unknown-fields`):
/// an embedded Kubernetes spec (a JobSpec) whose own schema would make the
/// CRD as large as the Job's; rebound checks it when it compiles the policy.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
