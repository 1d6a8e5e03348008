//! Running a scenario against a server through a `kube::Client` (TLS and a
//! token for a real server, plain HTTP for the embedded one): each step's
//! answer is selected and normalised into a [`StepRecord`]; the recorder
//! writes them, the replay test compares them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Request};
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::normalise::Normaliser;
use super::scenario::{Action, Body, Keep, Scenario, Until, Wait};
use super::select::select;

/// One step's normalised, selected answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepRecord {
    /// The step's name.
    pub step: String,
    /// The request line with its placeholders (`POST /api/v1/...`), so a
    /// recording made from other steps is noticed.
    pub request: String,
    /// `{status, headers, body}`, or `{events}` for event collection.
    pub answer: Value,
}

/// A scenario's recording (`tests/conformance/recorded/<name>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recording {
    /// Scenario name.
    pub scenario: String,
    /// What it checks.
    pub about: String,
    /// The server it was recorded from (`/version` gitVersion).
    pub server: String,
    /// The steps.
    pub steps: Vec<StepRecord>,
}

/// Why a scenario could not run at all (answers, even errors, are records).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The request could not be built (a bad header or path).
    #[error("scenario {scenario}, step {step}: building the request: {message}")]
    Build {
        /// Scenario.
        scenario: String,
        /// Step.
        step: String,
        /// Cause.
        message: String,
    },
    /// No answer at all (connection refused, TLS...).
    #[error("scenario {scenario}, step {step}: no answer: {source}")]
    Transport {
        /// Scenario.
        scenario: String,
        /// Step.
        step: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

/// The User-Agent of every request: field manager `rebound-conformance`.
pub const USER_AGENT: &str = "rebound-conformance/v1.0 (linux/amd64)";

struct Raw {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

struct Run<'a> {
    sc: &'a Scenario,
    client: &'a kube::Client,
    vars: HashMap<String, String>,
    norm: Normaliser,
    watches: HashMap<&'static str, mpsc::UnboundedReceiver<Option<Value>>>,
}

fn header_json(h: &HeaderMap, names: &[&'static str], norm: &mut Normaliser) -> Value {
    let mut m = Map::new();
    for n in names {
        let vals: Vec<String> = h
            .get_all(*n)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| norm.text(v))
            .collect();
        match vals.len() {
            0 => {}
            1 => {
                m.insert((*n).to_string(), json!(vals[0]));
            }
            _ => {
                m.insert((*n).to_string(), json!(vals));
            }
        }
    }
    Value::Object(m)
}

fn wait_holds(w: &Wait, raw: &Raw) -> bool {
    match w {
        Wait::Status(c) => raw.status == *c,
        Wait::Field(p, v) => raw.body.pointer(p).unwrap_or(&Value::Null) == v,
        Wait::Len(p, n) => raw
            .body
            .pointer(p)
            .and_then(Value::as_array)
            .is_some_and(|a| a.len() == *n),
    }
}

impl Run<'_> {
    fn subst(&self, s: &str) -> String {
        let mut out = s.replace("{ns}", &self.sc.ns);
        while let Some(start) = out.find("{{") {
            let Some(len) = out[start..].find("}}") else {
                break;
            };
            let var = out[start + 2..start + len].to_string();
            // `{{rv+1000000}}`: a number captured, plus an offset (a
            // resourceVersion from the future)
            let (name, offset) = match var.split_once('+') {
                Some((n, o)) => (n.to_string(), o.parse::<u64>().ok()),
                None => (var.clone(), None),
            };
            let val = match (self.vars.get(&name), offset) {
                (Some(v), Some(o)) => v
                    .parse::<u64>()
                    .map(|n| (n + o).to_string())
                    .unwrap_or_else(|_| format!("<not a number:{name}>")),
                (Some(v), None) => v.clone(),
                (None, _) => format!("<missing:{var}>"),
            };
            out.replace_range(start..start + len + 2, &val);
        }
        out
    }

    fn build(
        &self,
        step: &str,
        r: &super::scenario::Request,
    ) -> Result<Request<kube::client::Body>, RunError> {
        let path = self.subst(&r.path);
        let query = self.subst(&r.query);
        let uri = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        let mut b = Request::builder()
            .method(r.method)
            .uri(uri)
            .header("User-Agent", USER_AGENT)
            .header("Accept", "application/json");
        let body = match &r.body {
            None => Vec::new(),
            Some(Body::Json(v)) => {
                b = b.header("Content-Type", "application/json");
                self.subst(&v.to_string()).into_bytes()
            }
            Some(Body::Raw(s)) => self.subst(s).into_bytes(),
        };
        let mut req = b
            .body(kube::client::Body::from(body))
            .map_err(|e| RunError::Build {
                scenario: self.sc.name.into(),
                step: step.into(),
                message: e.to_string(),
            })?;
        for (n, v) in &r.headers {
            let v = self.subst(v);
            let (Ok(name), Ok(val)) = (
                axum::http::HeaderName::from_bytes(n.as_bytes()),
                axum::http::HeaderValue::from_str(&v),
            ) else {
                return Err(RunError::Build {
                    scenario: self.sc.name.into(),
                    step: step.into(),
                    message: format!("bad header {n}: {v}"),
                });
            };
            req.headers_mut().insert(name, val);
        }
        Ok(req)
    }

    fn transport(&self, step: &str, source: kube::Error) -> RunError {
        RunError::Transport {
            scenario: self.sc.name.into(),
            step: step.into(),
            source,
        }
    }

    async fn send(&self, step: &str, r: &super::scenario::Request) -> Result<Raw, RunError> {
        let req = self.build(step, r)?;
        let res = self
            .client
            .send(req)
            .await
            .map_err(|e| self.transport(step, e))?;
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| self.transport(step, e))?
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok(Raw {
            status,
            headers,
            body,
        })
    }

    fn capture(&mut self, r: &super::scenario::Request, raw: &Raw) {
        for (var, ptr) in &r.captures {
            let v = match raw.body.pointer(ptr) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            if let Some(v) = v {
                self.vars.insert((*var).to_string(), v);
            }
        }
    }

    fn answer(&mut self, r: &super::scenario::Request, raw: &Raw, timed_out: bool) -> Value {
        let mut a = json!({"status": raw.status, "headers": Value::Null, "body": raw.body});
        if timed_out {
            a["waitTimedOut"] = json!(true);
        }
        let mut a = select(&a, &r.filters, &r.keep);
        if let Some(m) = a.as_object_mut() {
            m.remove("headers");
            if !matches!(r.keep, Keep::StatusCode) {
                m.insert(
                    "headers".into(),
                    header_json(&raw.headers, &r.compare_headers, &mut self.norm),
                );
            }
            if let Some(b) = m.remove("body") {
                if let Some(req) = &r.body
                    && let Body::Json(v) = req
                {
                    self.norm.learn(v);
                }
                m.insert("body".into(), self.norm.body(&b));
            }
        }
        a
    }

    async fn open_watch(
        &mut self,
        step: &str,
        id: &'static str,
        r: &super::scenario::Request,
    ) -> Result<Value, RunError> {
        let req = self.build(step, r)?;
        let res = self
            .client
            .send(req)
            .await
            .map_err(|e| self.transport(step, e))?;
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let (tx, rx) = mpsc::unbounded_channel();
        self.watches.insert(id, rx);
        let mut body = res.into_body();
        tokio::spawn(async move {
            let mut buf: Vec<u8> = Vec::new();
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buf.extend_from_slice(&data);
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim();
                    if text.is_empty() {
                        continue;
                    }
                    let v = serde_json::from_str(text).unwrap_or_else(|_| json!(text));
                    if tx.send(Some(v)).is_err() {
                        return;
                    }
                }
            }
            let rest = String::from_utf8_lossy(&buf).trim().to_string();
            if !rest.is_empty() {
                let v = serde_json::from_str(&rest).unwrap_or_else(|_| json!(rest));
                let _ = tx.send(Some(v));
            }
            let _ = tx.send(None);
        });
        let mut a = json!({"status": status});
        a["headers"] = header_json(&headers, &r.compare_headers, &mut self.norm);
        Ok(a)
    }

    async fn collect(
        &mut self,
        id: &'static str,
        until: Until,
        keep: &Keep,
        timeout: Duration,
    ) -> Value {
        let Some(mut rx) = self.watches.remove(id) else {
            return json!({"error": format!("no watch {id}")});
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = Vec::new();
        let mut closed = false;
        loop {
            let wait = match until {
                Until::Count(n) if events.len() >= n => {
                    // a short settle: extra events show up as a difference
                    tokio::time::Instant::now() + Duration::from_millis(300)
                }
                _ => deadline,
            };
            match tokio::time::timeout_at(wait.min(deadline), rx.recv()).await {
                Ok(Some(Some(ev))) => events.push(ev),
                Ok(Some(None)) | Ok(None) => {
                    closed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let events: Vec<Value> = events
            .iter()
            .map(|e| {
                let sel = select(e, &[], keep);
                self.norm.event(&sel)
            })
            .collect();
        let mut a = json!({"events": events});
        if matches!(until, Until::Closed) {
            a["closed"] = json!(closed);
        }
        if !closed {
            // kept for later collection steps
            self.watches.insert(id, rx);
        }
        a
    }
}

/// Runs every step of `sc` against the server behind `client`.
pub async fn run(sc: &Scenario, client: &kube::Client) -> Result<Vec<StepRecord>, RunError> {
    let mut run = Run {
        sc,
        client,
        vars: HashMap::new(),
        norm: Normaliser::new(),
        watches: HashMap::new(),
    };
    let mut out = Vec::new();
    for step in &sc.steps {
        let (request, answer) = match &step.action {
            Action::Send(r) => {
                let start = Instant::now();
                let mut raw = run.send(step.name, r).await?;
                let mut timed_out = false;
                if let Some(w) = &r.wait {
                    while !wait_holds(w, &raw) {
                        if start.elapsed() > step.timeout {
                            timed_out = true;
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(150)).await;
                        raw = run.send(step.name, r).await?;
                    }
                }
                run.capture(r, &raw);
                (r.line(), run.answer(r, &raw, timed_out))
            }
            Action::Watch(id, r) => (r.line(), run.open_watch(step.name, id, r).await?),
            Action::Events { watch, until, keep } => (
                format!("EVENTS {watch}"),
                run.collect(watch, *until, keep, step.timeout).await,
            ),
            Action::Sleep(d) => {
                tokio::time::sleep(*d).await;
                (format!("SLEEP {}ms", d.as_millis()), json!({}))
            }
        };
        out.push(StepRecord {
            step: step.name.to_string(),
            request,
            answer,
        });
    }
    Ok(out)
}
