//! What a request addresses, read from its method, path and query alone
//! (a proxy has no registry of resources): the Kubernetes verb, resource,
//! subresource, namespace and name, with the same meaning as the embedded
//! server's request log (`crates/rebound-sim/src/server/log.rs`).

use axum::http::Method;

/// The parts of a request the log and the fault rules look at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Target {
    /// get, list, watch, create, update, patch, delete, deletecollection
    /// (discovery and other non-resource paths are `get`).
    pub verb: &'static str,
    /// Resource plural, empty for non-resource paths.
    pub resource: String,
    /// Subresource (`status`, `log`, ...), empty when none.
    pub subresource: String,
    /// Namespace in the path.
    pub namespace: Option<String>,
    /// Object name in the path.
    pub name: Option<String>,
}

/// Percent-decode a query string or a part of one, `+` as a space (as
/// clients encode it), for matching label selectors and reading
/// parameters. Here, below the bench and the test bed that both read
/// queries, so neither imports the other for it.
pub fn decode_query(s: &str) -> String {
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// The decoded value of query parameter `key`.
pub fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|p| p.split_once('=').or(Some((p, ""))))
        .find(|(k, _)| decode_query(k) == key)
        .map(|(_, v)| decode_query(v))
}

/// Whether the query asks for a watch (`watch=true` or `watch=1`).
pub fn is_watch(query: &str) -> bool {
    matches!(query_param(query, "watch").as_deref(), Some("true" | "1"))
}

/// Reads a request's target from its path: `/api/v1/...` or
/// `/apis/<group>/<version>/...`, then `namespaces/<ns>/` when the next
/// segment names a namespaced resource (not the namespace's own
/// `status` or `finalize`), then `<plural>[/<name>[/<subresource>]]`.
pub fn classify(method: &Method, path: &str, query: &str) -> Target {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => &[],
    };
    if rest.is_empty() {
        return Target {
            verb: "get",
            ..Target::default()
        };
    }
    let (namespace, rest) = match rest {
        ["namespaces", ns, next, ..] if !matches!(*next, "status" | "finalize") => {
            (Some((*ns).to_string()), &rest[2..])
        }
        _ => (None, rest),
    };
    let resource = rest[0].to_string();
    let name = rest.get(1).map(|s| (*s).to_string());
    let subresource = rest.get(2).map(|s| (*s).to_string()).unwrap_or_default();
    let verb = match *method {
        Method::GET if name.is_some() => "get",
        Method::GET if is_watch(query) => "watch",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_some() => "delete",
        Method::DELETE => "deletecollection",
        _ => "get",
    };
    Target {
        verb,
        resource,
        subresource,
        namespace,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(
        m: Method,
        path: &str,
        q: &str,
    ) -> (String, String, String, Option<String>, Option<String>) {
        let t = classify(&m, path, q);
        (
            t.verb.to_string(),
            t.resource,
            t.subresource,
            t.namespace,
            t.name,
        )
    }

    #[test]
    fn paths_read_as_the_embedded_log_reads_them() {
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            t(
                Method::GET,
                "/api/v1/namespaces/ml/pods",
                "watch=true&resourceVersion=5"
            ),
            ("watch".into(), "pods".into(), "".into(), s("ml"), None)
        );
        assert_eq!(
            t(
                Method::GET,
                "/api/v1/namespaces/ml/pods",
                "labelSelector=a%3Db"
            ),
            ("list".into(), "pods".into(), "".into(), s("ml"), None)
        );
        assert_eq!(
            t(
                Method::GET,
                "/api/v1/namespaces/ml/pods/p-0/log",
                "tailLines=5"
            ),
            ("get".into(), "pods".into(), "log".into(), s("ml"), s("p-0"))
        );
        assert_eq!(
            t(
                Method::DELETE,
                "/api/v1/namespaces/ml/pods",
                "labelSelector=x"
            ),
            (
                "deletecollection".into(),
                "pods".into(),
                "".into(),
                s("ml"),
                None
            )
        );
        // The namespaces resource itself, and its subresources.
        assert_eq!(
            t(Method::GET, "/api/v1/namespaces/ml", ""),
            ("get".into(), "namespaces".into(), "".into(), None, s("ml"))
        );
        assert_eq!(
            t(Method::PUT, "/api/v1/namespaces/ml/finalize", ""),
            (
                "update".into(),
                "namespaces".into(),
                "finalize".into(),
                None,
                s("ml")
            )
        );
        assert_eq!(
            t(Method::PATCH, "/api/v1/nodes/n-1/status", ""),
            (
                "patch".into(),
                "nodes".into(),
                "status".into(),
                None,
                s("n-1")
            )
        );
        assert_eq!(
            t(
                Method::POST,
                "/apis/bus.volcano.sh/v1alpha1/namespaces/ml/commands",
                ""
            ),
            ("create".into(), "commands".into(), "".into(), s("ml"), None)
        );
        assert_eq!(
            t(Method::GET, "/apis/kubeflow.org/v1", ""),
            ("get".into(), "".into(), "".into(), None, None)
        );
        assert_eq!(
            t(Method::GET, "/version", ""),
            ("get".into(), "".into(), "".into(), None, None)
        );
    }

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(
            query_param("a=1&labelSelector=x%3Dy&watch", "labelSelector").as_deref(),
            Some("x=y")
        );
        assert!(is_watch("resourceVersion=1&watch=1"));
        assert!(!is_watch("watch=false"));
        assert_eq!(query_param("watch", "watch").as_deref(), Some(""));
    }
}
