//! Kubernetes-shaped errors.
//!
//! Every failed request answers with a `meta/v1` `Status` object whose
//! `reason`, `code` and `details` match what a real kube-apiserver sends
//! (KUBE-API-NOTES.md): clients such as `kube` and `kubectl` branch on them.

use serde_json::{Value, json};

/// An error to be returned to an HTTP client as a `Status` object.
///
/// Built through the constructors below so that `details` always has the
/// shape the real server uses for that reason.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code, also `Status.code`.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human readable message, `Status.message`.
    pub message: String,
    /// `Status.details`, or `None` when the real server sends none.
    pub details: Option<Value>,
    /// Extra response headers (e.g. `Retry-After`).
    pub retry_after: Option<u64>,
}

/// Where an error happened: the resource (plural and group) and the name.
/// `details.kind` of NotFound/AlreadyExists/Conflict is the plural resource.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// API group, empty for the core group.
    pub group: &'a str,
    /// Plural resource name, e.g. `configmaps`.
    pub plural: &'a str,
    /// Object name.
    pub name: &'a str,
}

fn target_details(t: Target<'_>) -> Value {
    let mut d = json!({"name": t.name, "kind": t.plural});
    if !t.group.is_empty() {
        d["group"] = json!(t.group);
    }
    d
}

fn qualified(t: Target<'_>) -> String {
    if t.group.is_empty() {
        t.plural.to_string()
    } else {
        format!("{}.{}", t.plural, t.group)
    }
}

/// One entry of `details.causes` in a 422 Invalid answer.
#[derive(Debug, Clone)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`...
    pub reason: &'static str,
    /// JSON path of the field, e.g. `metadata.name` or `spec.replicas`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 404 for a named object that does not exist.
    pub fn not_found(t: Target<'_>) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", qualified(t), t.name),
        );
        e.details = Some(target_details(t));
        e
    }

    /// 404 for a path that names no resource at all.
    pub fn unknown_path(path: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        let _ = path;
        e.details = Some(json!({}));
        e
    }

    /// 409 when creating an object whose name is taken.
    pub fn already_exists(t: Target<'_>) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", qualified(t), t.name),
        );
        e.details = Some(target_details(t));
        e
    }

    /// 409 on a resourceVersion or uid precondition mismatch.
    pub fn conflict(t: Target<'_>, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                qualified(t),
                t.name,
                why
            ),
        );
        e.details = Some(target_details(t));
        e
    }

    /// 409 for server-side apply conflicts, one cause per contested field.
    pub fn apply_conflict(t: Target<'_>, fields: &[(String, String)]) -> Self {
        let msg = fields
            .iter()
            .map(|(m, f)| format!("conflict with \"{m}\": {f}"))
            .collect::<Vec<_>>()
            .join(", ");
        let n = fields.len();
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {n} conflict{}: {msg}",
                if n == 1 { "" } else { "s" }
            ),
        );
        let causes: Vec<Value> = fields
            .iter()
            .map(|(m, f)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\""), "field": f}))
            .collect();
        e.details = Some(json!({"causes": causes}));
        let _ = t;
        e
    }

    /// 422 Invalid with causes; `details.kind` is the Kind, not the plural.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let mut parts: Vec<String> = Vec::new();
        for p in causes.iter().map(|c| format!("{}: {}", c.field, c.message)) {
            if !parts.contains(&p) {
                parts.push(p);
            }
        }
        let many = parts.len() > 1;
        let summary = parts.join(", ");
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        // several causes are listed in brackets, as Go's aggregate error
        let summary = if many {
            format!("[{summary}]")
        } else {
            summary
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{gk} \"{name}\" is invalid: {summary}"),
        );
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        let mut d = json!({"name": name, "kind": kind, "causes": causes});
        if name.is_empty()
            && let Some(m) = d.as_object_mut()
        {
            m.remove("name");
        }
        if !group.is_empty() {
            d["group"] = json!(group);
        }
        e.details = Some(d);
        e
    }

    /// 403 Forbidden by the server's own rules (not RBAC): `<plural>
    /// "<name>" is forbidden: <why>`, with optional causes.
    pub fn forbidden(t: Target<'_>, why: &str, causes: Vec<Cause>) -> Self {
        let mut e = Self::new(
            403,
            "Forbidden",
            format!("{} \"{}\" is forbidden: {why}", qualified(t), t.name),
        );
        let mut d = target_details(t);
        if !causes.is_empty() {
            d["causes"] = Value::Array(
                causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect(),
            );
        }
        e.details = Some(d);
        e
    }

    /// 405 for a verb the server refuses on a resource (deletecollection of
    /// namespaces), with the real server's message and empty details.
    pub fn not_allowed_here() -> Self {
        let mut e = Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        e.details = Some(json!({}));
        e
    }

    /// 400 BadRequest, e.g. undecodable bodies or bad micro-times.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 for a patch type the resource does not support.
    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                if ct.contains("strategic-merge-patch") {
                    String::new()
                } else {
                    format!(" (got {ct})")
                }
            ),
        )
    }

    /// 415 for a PATCH with a content type that is no patch type.
    pub fn unsupported_patch_type() -> Self {
        let mut e = Self::new(415, "UnsupportedMediaType", "415: Unsupported Media Type");
        e.details = Some(json!({}));
        e
    }

    /// 422 for a JSON patch that cannot be applied (a failed `test`, a
    /// missing path): the real server's message and empty details.
    pub fn patch_rejected() -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.details = Some(json!({}));
        e
    }

    /// 409 for a failed delete precondition; `details.kind` is the Kind.
    pub fn precondition(
        kind: &str,
        name: &str,
        what: &str,
        want: &str,
        have: &str,
        hint: &str,
    ) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {kind} \"{name}\": the {what} in the precondition ({want}) does not match the {what} in record ({have}). {hint}"
            ),
        );
        e.details = Some(json!({"name": name, "kind": kind}));
        e
    }

    /// 410 Expired: a resourceVersion or continue token older than the
    /// history the server keeps.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 504 Timeout with cause `ResourceVersionTooLarge`, for reads from the future.
    pub fn too_large_rv(rv: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {rv}, current: {current}"),
        );
        e.details = Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        );
        e
    }

    /// 500 InternalError (injected faults and internal bugs).
    pub fn internal(message: impl Into<String>) -> Self {
        let m = message.into();
        let mut e = Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {m}"),
        );
        e.details = Some(json!({"causes": [{"message": m}]}));
        e
    }

    /// 429 TooManyRequests with `Retry-After` (injected throttling).
    pub fn too_many_requests(retry_after: u64) -> Self {
        let mut e = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        e.details = Some(json!({"retryAfterSeconds": retry_after}));
        e.retry_after = Some(retry_after);
        e
    }

    /// Any other status code (used by fault injection).
    pub fn other(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            503 => "ServiceUnavailable",
            502 | 504 => "Timeout",
            401 => "Unauthorized",
            403 => "Forbidden",
            _ => "InternalError",
        };
        Self::new(code, reason, message)
    }

    /// The `Status` object sent as the response body (or in a watch ERROR event).
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// Errors of the handle's own methods (not HTTP answers).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Binding or serving the loopback listener failed.
    #[error("embedded API server I/O on {addr}: {source}")]
    Io {
        /// Address being bound or served.
        addr: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A YAML document could not be parsed.
    #[error("invalid YAML in document {index}: {message}")]
    Yaml {
        /// 0-based document index in a multi-document string.
        index: usize,
        /// Parser message.
        message: String,
    },
    /// The server refused an object given to a direct (in-process) method.
    #[error("{what}: {source}")]
    Api {
        /// What was being done, e.g. `registering CRD jobs.batch.volcano.sh`.
        what: String,
        /// The Kubernetes-shaped refusal.
        #[source]
        source: ApiError,
    },
}
