//! The HTTP front: one catch-all axum handler that parses Kubernetes paths,
//! applies injected faults and latency, dispatches to discovery, the verbs
//! or a watch, renders `Status` errors and logs every request.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

use super::discovery;
use super::errors::ApiError;
use super::log::RequestRecord;
use super::openapi;
use super::ops::{DeleteOpts, ListQuery, Loc, Reply, WriteOpts};
use super::patch::PatchType;
use super::render;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::Shared;
use super::table;
use super::watch::{self, WatchQuery};

mod route;
use route::verb_of;
pub use route::{Route, parse_path};

/// A request's query string, decoded, in order.
struct Query(Vec<(String, String)>);

/// The router serving everything through one handler.
pub fn router(shared: Arc<Shared>, server_address: String) -> Router {
    Router::new()
        .fallback(handle)
        .with_state((shared, Arc::from(server_address.as_str())))
}

type AppState = (Arc<Shared>, Arc<str>);

fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{}\"", w.replace('"', "\\\""))) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.to_status(), &[]);
    if let Some(s) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// The mux's answer for a path that names nothing at all.
fn plain_not_found() -> Response {
    let mut r = Response::new(Body::from("404 page not found\n"));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn handle(State((shared, addr)): State<AppState>, req: Request) -> Response {
    let at = Instant::now();
    let wall = SystemTime::now();
    let method = req.method().clone();
    let uri = req.uri().clone();
    let headers = req.headers().clone();
    let path = uri.path().to_string();
    let q = Query::parse(uri.query());
    let route = parse_path(&shared, &path);
    let verb = verb_of(&method, &route, &q);
    let ua = header_str(&headers, header::USER_AGENT);
    let ct = header_str(&headers, header::CONTENT_TYPE);
    if let Some(d) = shared.inject.latency() {
        tokio::time::sleep(d).await;
    }
    let plural = match &route {
        Route::Resource(l) => l.res.plural.as_str(),
        _ => "",
    };
    if verb == "watch"
        && let Some(d) = shared.inject.hold.held(ua.as_deref(), plural)
    {
        tokio::time::sleep(d).await;
    }
    let response = match shared.inject.take_failure(verb, plural) {
        Some(e) => error_response(&e),
        None => {
            let body = axum::body::to_bytes(req.into_body(), 512 * 1024 * 1024).await;
            match body {
                Ok(body) => {
                    let answer =
                        dispatch(&shared, &addr, &path, &method, &route, &q, &headers, &body).await;
                    // Carried out; the answer, when a rule says so, lost.
                    match shared.inject.take_lost_answer(verb, plural) {
                        Some(e) => error_response(&e),
                        None => answer,
                    }
                }
                Err(e) => error_response(&ApiError::bad_request(format!("reading body: {e}"))),
            }
        }
    };
    let (resource, subresource, namespace, name) = match &route {
        Route::Resource(l) => (
            l.res.plural.clone(),
            l.sub.clone().unwrap_or_default(),
            l.ns.clone(),
            l.name.clone(),
        ),
        _ => (String::new(), String::new(), None, None),
    };
    shared.log.push(RequestRecord {
        at,
        wall,
        verb,
        method: method.to_string(),
        path,
        query: uri.query().unwrap_or("").to_string(),
        content_type: ct,
        status: response.status().as_u16(),
        elapsed: at.elapsed(),
        user_agent: ua,
        resource,
        subresource,
        namespace,
        name,
    });
    response
}

fn manager(q: &Query, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    header_str(headers, header::USER_AGENT)
        .map(|ua| ua.split('/').next().unwrap_or("").to_string())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn list_query(loc: &Loc, q: &Query) -> Result<ListQuery, ApiError> {
    if q.get("resourceVersionMatch").is_some_and(|m| !m.is_empty())
        && q.get("resourceVersion").is_none_or(str::is_empty)
        && !(q.flag("watch") && q.flag("sendInitialEvents"))
    {
        return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", vec![super::errors::Cause {
            reason: "FieldValueForbidden",
            field: "resourceVersionMatch".into(),
            message: "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
        }]));
    }
    Ok(ListQuery {
        labels: LabelSelector::parse(q.get("labelSelector").unwrap_or(""))?,
        fields: FieldSelector::parse(
            q.get("fieldSelector").unwrap_or(""),
            &loc.res.group,
            &loc.res.plural,
        )?,
        limit: match q.get("limit") {
            Some(l) if !l.is_empty() => l.parse().map_err(|_| {
                ApiError::bad_request(format!("strconv.ParseInt: parsing {l:?}: invalid syntax"))
            })?,
            _ => 0,
        },
        cont: q.get("continue").map(str::to_string),
        rv: q.get("resourceVersion").map(str::to_string),
        rv_match: q.get("resourceVersionMatch").map(str::to_string),
    })
}

fn reply(r: Result<Reply, ApiError>) -> Response {
    match r {
        Ok(r) => json_response(r.code, &r.body, &r.warnings),
        Err(e) => error_response(&e),
    }
}

/// Decodes a create/update body: JSON or YAML; protobuf and CBOR are a
/// 415 (clients such as kubectl then fall back to JSON).
fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = header_str(headers, header::CONTENT_TYPE).unwrap_or_default();
    let mime = ct.split(';').next().unwrap_or("").trim();
    match mime {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}"))),
        "application/yaml" => super::ops::parse_yaml_or_json(body),
        _ => Err(ApiError::unsupported_media_type(&ct)),
    }
}

#[allow(clippy::too_many_arguments)]
async fn dispatch(
    shared: &Arc<Shared>,
    addr: &str,
    path: &str,
    method: &Method,
    route: &Route,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let reg = || shared.registry_snapshot();
    let not_found = |p: &str| error_response(&ApiError::unknown_path(p));
    let loc = match route {
        Route::Version => return json_response(200, &discovery::version(&shared.opts), &[]),
        Route::Health => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return r;
        }
        Route::CoreVersions | Route::Groups => {
            let core = matches!(route, Route::CoreVersions);
            let accept = header_str(headers, header::ACCEPT);
            let mut r = match discovery::aggregated_version(accept.as_deref()) {
                Some(v) => {
                    let mut r = json_response(200, &discovery::aggregated(&reg(), core, v), &[]);
                    if let Ok(ct) = HeaderValue::from_str(&format!(
                        "application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList"
                    )) {
                        r.headers_mut().insert(header::CONTENT_TYPE, ct);
                    }
                    r
                }
                None if core => json_response(200, &discovery::core_versions(addr), &[]),
                None => json_response(200, &discovery::groups(&reg()), &[]),
            };
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept"));
            return r;
        }
        Route::Group(g) => {
            return match discovery::group(&reg(), g) {
                Some(d) => json_response(200, &d, &[]),
                None => plain_not_found(),
            };
        }
        Route::ResourceList(g, v) => {
            return match discovery::resource_list(&reg(), g, v) {
                Some(d) => json_response(200, &d, &[]),
                None => plain_not_found(),
            };
        }
        Route::OpenApiIndex => return json_response(200, &openapi::index(&reg()), &[]),
        Route::OpenApi(gv) => {
            return match openapi::document(&reg(), gv) {
                Some(d) => json_response(200, &d, &[]),
                None => not_found(gv),
            };
        }
        Route::Unknown => {
            // under a served group-version: a Status; elsewhere the mux's text
            let segs: Vec<&str> = path.split('/').filter(|x| !x.is_empty()).collect();
            // (the CRD handler of a custom group answers with text too)
            let snapshot = reg();
            let served = match segs.as_slice() {
                ["api", v, ..] => discovery::resource_list(&snapshot, "", v).is_some(),
                ["apis", g, v, ..] => {
                    snapshot.all().any(|r| r.group == *g && !r.custom)
                        && discovery::resource_list(&snapshot, g, v).is_some()
                }
                _ => false,
            };
            return if served {
                not_found("path")
            } else {
                plain_not_found()
            };
        }
        Route::Resource(loc) => loc,
    };
    if let Err(e) = super::options::check(method, &q.0) {
        return error_response(&e);
    }
    let wopts = WriteOpts {
        explicit_manager: q.get("fieldManager").is_some_and(|m| !m.is_empty()),
        manager: manager(q, headers),
        force: q.flag("force"),
        strict: q.get("fieldValidation") == Some("Strict"),
        ignore_unknown: q.get("fieldValidation") == Some("Ignore"),
        dry_run: q.get("dryRun").is_some_and(|d| !d.is_empty()),
    };
    let accept = header_str(headers, header::ACCEPT);
    let wants_table = accept.as_deref().is_some_and(|a| a.contains("as=Table"));
    let wants_meta = render::wants_metadata(accept.as_deref());
    match *method {
        Method::GET if loc.sub.as_deref() == Some("log") => {
            let tail = q.get("tailLines").and_then(|t| t.parse().ok());
            let limit = q.get("limitBytes").and_then(|t| t.parse().ok());
            match shared.pod_log(loc, q.get("container"), tail) {
                Ok((code, text)) => {
                    let text = crate::kubelet_logs::limit_bytes(text, limit);
                    let mut r = Response::new(Body::from(text));
                    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
                    if code != 204 {
                        r.headers_mut()
                            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                    }
                    r
                }
                Err(e) => error_response(&e),
            }
        }
        Method::GET if loc.name.is_some() => match shared.get(loc) {
            Ok(r) if wants_meta && loc.sub.is_none() => {
                json_response(200, &render::partial(&r.body), &[])
            }
            Ok(r) if wants_table && loc.sub.is_none() => {
                json_response(200, &table::single(loc, &r.body), &[])
            }
            other => reply(other),
        },
        Method::GET if q.flag("watch") => {
            let lq = match list_query(loc, q) {
                Ok(l) => l,
                Err(e) => return error_response(&e),
            };
            let wq = WatchQuery {
                labels: lq.labels,
                fields: lq.fields,
                rv: lq.rv,
                send_initial: q.flag("sendInitialEvents"),
                bookmarks: q.flag("allowWatchBookmarks"),
                meta_only: wants_meta,
                timeout: q
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs),
            };
            match watch::start(shared.clone(), loc.clone(), wq) {
                Ok(stream) => {
                    let mut r = Response::new(Body::from_stream(stream));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    r
                }
                Err(e) => error_response(&e),
            }
        }
        Method::GET => {
            let lq = match list_query(loc, q) {
                Ok(l) => l,
                Err(e) => return error_response(&e),
            };
            match shared.list(loc, &lq).await {
                Ok(r) if wants_meta => json_response(200, &render::partial_list(&r.body), &[]),
                Ok(r) if wants_table => json_response(200, &table::list(loc, &r.body), &[]),
                other => reply(other),
            }
        }
        Method::POST => {
            reply(parse_body(headers, body).and_then(|b| shared.create(loc, b, &wopts)))
        }
        Method::PUT => reply(parse_body(headers, body).and_then(|b| shared.update(loc, b, &wopts))),
        Method::PATCH => {
            let ct = header_str(headers, header::CONTENT_TYPE).unwrap_or_default();
            match PatchType::from_content_type(&ct) {
                Some(pt) => reply(shared.patch(loc, pt, body, &wopts)),
                None => error_response(&ApiError::unsupported_patch_type()),
            }
        }
        Method::DELETE => {
            let mut d = DeleteOpts {
                propagation: q.get("propagationPolicy").map(str::to_string),
                grace: q.get("gracePeriodSeconds").and_then(|g| g.parse().ok()),
                dry_run: wopts.dry_run,
                ..DeleteOpts::default()
            };
            if !body.is_empty()
                && let Ok(b) = serde_json::from_slice::<Value>(body)
            {
                d.merge_body(&b);
            }
            if loc.name.is_some() {
                reply(shared.delete(loc, &d))
            } else {
                reply(list_query(loc, q).and_then(|lq| shared.delete_collection(loc, &lq, &d)))
            }
        }
        _ => error_response(&ApiError::method_not_allowed(format!(
            "method {method} is not supported"
        ))),
    }
}
