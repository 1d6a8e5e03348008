//! Reading a request: the route its path addresses, its query string
//! (percent-decoded) and the verb it is logged and authorised as.

use axum::http::Method;

use super::Query;
use crate::server::ops::Loc;
use crate::server::state::Shared;

/// What a path addresses.
#[derive(Debug, Clone)]
pub enum Route {
    /// `/version`
    Version,
    /// `/healthz`, `/readyz`, `/livez`
    Health,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`
    ResourceList(String, String),
    /// An object or collection.
    Resource(Loc),
    /// `/openapi/v3`
    OpenApiIndex,
    /// `/openapi/v3/<gv path>`
    OpenApi(String),
    /// Nothing served here.
    Unknown,
}

/// Parses a request path against the current registry.
pub fn parse_path(shared: &Shared, path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Version,
        ["healthz" | "readyz" | "livez", ..] => return Route::Health,
        ["api"] => return Route::CoreVersions,
        ["openapi", "v3"] => return Route::OpenApiIndex,
        ["openapi", "v3", rest @ ..] => return Route::OpenApi(rest.join("/")),
        ["apis"] => return Route::Groups,
        ["apis", g] => return Route::Group(g.to_string()),
        ["api", v] => return Route::ResourceList(String::new(), v.to_string()),
        ["apis", g, v] => return Route::ResourceList(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Unknown,
    };
    let namespaced_target = rest.len() >= 3
        && rest[0] == "namespaces"
        && shared
            .lookup(group, version, rest[2])
            .is_some_and(|r| r.namespaced);
    let (ns, rest) = if namespaced_target {
        (Some(rest[1]), &rest[2..])
    } else {
        (None, rest)
    };
    let Some((plural, more)) = rest.split_first() else {
        return Route::Unknown;
    };
    let Some(res) = shared.lookup(group, version, plural) else {
        return Route::Unknown;
    };
    if more.len() > 2 {
        return Route::Unknown;
    }
    let name = more.first().copied();
    let sub = more.get(1).copied();
    if let Some(s) = sub {
        let ok = match s {
            "status" => res.status,
            "scale" => res.scale.is_some(),
            "log" | "binding" | "eviction" => res.pod_extras,
            _ => false,
        };
        if !ok {
            return Route::Unknown;
        }
    }
    Route::Resource(Loc::new(res, version, ns, name, sub))
}

impl Query {
    pub(super) fn parse(q: Option<&str>) -> Self {
        let pairs = q
            .map(|q| {
                q.split('&')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once('=').unwrap_or((p, ""));
                        (decode(k), decode(v))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self(pairs)
    }
    pub(super) fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
    pub(super) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(c) => {
                        out.push(c);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn verb_of(method: &Method, route: &Route, q: &Query) -> &'static str {
    let Route::Resource(loc) = route else {
        return "get";
    };
    match *method {
        Method::GET if loc.name.is_some() => "get",
        Method::GET if q.flag("watch") => "watch",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if loc.name.is_some() => "delete",
        Method::DELETE => "deletecollection",
        _ => "get",
    }
}
