//! The options of a write as the real server validates them from the
//! query, before anything else: a 422 naming `CreateOptions`,
//! `UpdateOptions`, `PatchOptions` or `DeleteOptions` (recorded in the
//! conformance scenario `validation-extras`).

use axum::http::Method;

use super::errors::{ApiError, Cause};

/// `CreateOptions`/`UpdateOptions`/`PatchOptions`/`DeleteOptions` as the
/// real server validates them (`ValidateCreateOptions`...): a
/// `fieldManager` of at most 128 bytes, `dryRun` only `All`,
/// `fieldValidation` one of the four values; 422 with one cause each.
pub fn check(method: &Method, q: &[(String, String)]) -> Result<(), ApiError> {
    let kind = match *method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        Method::PATCH => "PatchOptions",
        Method::DELETE => "DeleteOptions",
        _ => return Ok(()),
    };
    let get = |k: &str| q.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let mut causes = Vec::new();
    if kind != "DeleteOptions"
        && let Some(m) = get("fieldManager")
        && m.len() > 128
    {
        causes.push(Cause {
            reason: "FieldValueTooLong",
            field: "fieldManager".into(),
            message: "Too long: may not be more than 128 bytes".into(),
        });
    }
    let dry: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "dryRun")
        .map(|(_, v)| v.as_str())
        .collect();
    if dry.iter().any(|d| *d != "All") {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "dryRun".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"All\"",
                serde_json::to_string(&dry).unwrap_or_default()
            ),
        });
    }
    if kind != "DeleteOptions"
        && let Some(v) = get("fieldValidation")
        && !matches!(v, "" | "Ignore" | "Strict" | "Warn")
    {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "fieldValidation".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
                serde_json::to_string(v).unwrap_or_default()
            ),
        });
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("meta.k8s.io", kind, "", causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_as_the_real_server_checks_them() {
        assert!(
            check(
                &Method::POST,
                &q(&[("dryRun", "All"), ("fieldValidation", "Strict")])
            )
            .is_ok()
        );
        assert!(check(&Method::GET, &q(&[("dryRun", "x")])).is_ok());
        let e = check(&Method::DELETE, &q(&[("dryRun", "All"), ("dryRun", "x")]))
            .err()
            .map(|e| e.to_status());
        assert_eq!(
            e.as_ref().map(|s| s["code"].clone()),
            Some(serde_json::json!(422))
        );
        assert_eq!(
            e.map(|s| s["message"].clone()),
            Some(serde_json::json!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: [\"All\",\"x\"]: supported values: \"All\""
            ))
        );
        let long = "m".repeat(129);
        assert!(check(&Method::PATCH, &q(&[("fieldManager", long.as_str())])).is_err());
        assert!(check(&Method::PUT, &q(&[("fieldValidation", "Loud")])).is_err());
    }
}
