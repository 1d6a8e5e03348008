//! The scenario format: a named list of steps (a request, an optional
//! condition to poll for, what to keep from the answer, values to capture
//! for later steps; or a watch to open and the events to collect from it).
//! The recorder and the replay test run the same `Scenario` values.

use std::time::Duration;

use serde_json::Value;

/// A request body.
#[derive(Debug, Clone)]
pub enum Body {
    /// JSON, sent as `application/json` unless another content type is set.
    Json(Value),
    /// Raw text (YAML for apply, a deliberately broken document...).
    Raw(String),
}

/// When a polled request is done.
#[derive(Debug, Clone)]
pub enum Wait {
    /// The answer's status code is this.
    Status(u16),
    /// The JSON at this pointer of the answer body equals the value
    /// (`Value::Null` also matches a missing field).
    Field(&'static str, Value),
    /// The list at this pointer has this many elements.
    Len(&'static str, usize),
}

/// Which parts of an answer are compared. Pointers address the answer
/// object `{status, headers, body}` (or an event `{type, object}`); a `*`
/// segment matches every element of an array.
#[derive(Debug, Clone)]
pub enum Keep {
    /// Status code, the chosen headers and the whole body.
    All,
    /// Only these pointers (`/status` and headers are always kept).
    Only(Vec<&'static str>),
    /// Everything but these pointers.
    Drop(Vec<&'static str>),
    /// The status code only.
    StatusCode,
}

/// Keeps only the elements of an array whose `key` field is in `values`
/// (e.g. the resources of a discovery document that the embedded server
/// claims to serve), before `Keep` applies.
#[derive(Debug, Clone)]
pub struct Filter {
    /// Pointer of the array (with `*` segments for nested arrays).
    pub array: &'static str,
    /// Pointer inside each element naming it (`/name`).
    pub key: &'static str,
    /// The names kept.
    pub values: Vec<String>,
}

/// An HTTP request and what to do with its answer.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: &'static str,
    /// Path with `{ns}` and `{{var}}` placeholders.
    pub path: String,
    /// Query string (without `?`), with placeholders.
    pub query: String,
    /// Extra headers (name, value).
    pub headers: Vec<(&'static str, String)>,
    /// Body, if any.
    pub body: Option<Body>,
    /// Poll until this holds (at most [`Step::timeout`]).
    pub wait: Option<Wait>,
    /// What of the answer is compared.
    pub keep: Keep,
    /// Array filters applied before `keep`.
    pub filters: Vec<Filter>,
    /// Headers compared (lower case); `content-type` by default.
    pub compare_headers: Vec<&'static str>,
    /// Values captured from the raw answer body: (variable, pointer).
    pub captures: Vec<(&'static str, &'static str)>,
}

/// When to stop collecting a watch's events.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// This many events have arrived.
    Count(usize),
    /// The stream has ended (timeoutSeconds, an ERROR, a closed stream).
    Closed,
}

/// One step.
#[derive(Debug, Clone)]
pub enum Action {
    /// Send a request (polling it while `wait` does not hold).
    Send(Request),
    /// Open a watch under an id (its answer head is recorded; events are
    /// collected by `Events`).
    Watch(&'static str, Request),
    /// Collect events of an open watch.
    Events {
        /// The watch.
        watch: &'static str,
        /// When to stop.
        until: Until,
        /// What of each event is compared.
        keep: Keep,
    },
    /// Wait (only where the real server's behaviour is a time, e.g. a
    /// bookmark before a watch's timeout).
    Sleep(Duration),
}

/// A named step.
#[derive(Debug, Clone)]
pub struct Step {
    /// Unique within the scenario.
    pub name: &'static str,
    /// What it does.
    pub action: Action,
    /// Longest wait (polls, event collection).
    pub timeout: Duration,
}

/// A named list of steps in the namespace `ns` (created by the first step
/// when `with_namespace`).
#[derive(Debug, Clone)]
pub struct Scenario {
    /// File name of the recording (`tests/conformance/recorded/<name>.json`).
    pub name: &'static str,
    /// What it checks, for the reader of the recording.
    pub about: &'static str,
    /// The namespace `{ns}` stands for (`cf-<name>`, unique per scenario so
    /// all run on one real server).
    pub ns: String,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl Request {
    fn new(method: &'static str, path: &str) -> Self {
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (path.to_string(), String::new()),
        };
        Self {
            method,
            path,
            query,
            headers: vec![],
            body: None,
            wait: None,
            keep: Keep::All,
            filters: vec![],
            compare_headers: vec!["content-type"],
            captures: vec![],
        }
    }

    /// The request line as recorded (`POST /api/v1/...?...`), placeholders kept.
    pub fn line(&self) -> String {
        if self.query.is_empty() {
            format!("{} {}", self.method, self.path)
        } else {
            format!("{} {}?{}", self.method, self.path, self.query)
        }
    }
}

impl Scenario {
    /// An empty scenario; `{ns}` is `cf-<name>`.
    pub fn new(name: &'static str, about: &'static str) -> Self {
        Self {
            name,
            about,
            ns: format!("cf-{name}"),
            steps: vec![],
        }
    }

    /// A scenario whose first step creates its namespace and waits for
    /// its `default` ServiceAccount (pods are refused before it exists).
    pub fn namespaced(name: &'static str, about: &'static str) -> Self {
        let mut s = Self::new(name, about);
        s.post(
            "create-namespace",
            "/api/v1/namespaces",
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}"}}),
        )
        .keep(Keep::StatusCode);
        s.get(
            "default-serviceaccount",
            "/api/v1/namespaces/{ns}/serviceaccounts/default",
        )
        .wait(Wait::Status(200))
        .keep(Keep::StatusCode);
        s
    }

    fn push(&mut self, name: &'static str, action: Action) -> &mut Step {
        assert!(
            !self.steps.iter().any(|s| s.name == name),
            "scenario {}: step {name} twice",
            self.name
        );
        self.steps.push(Step {
            name,
            action,
            timeout: DEFAULT_TIMEOUT,
        });
        match self.steps.last_mut() {
            Some(s) => s,
            None => unreachable!("a step was just pushed"),
        }
    }

    /// A request step.
    pub fn send(
        &mut self,
        name: &'static str,
        method: &'static str,
        path: &str,
        body: Option<Body>,
    ) -> &mut Step {
        let mut r = Request::new(method, path);
        r.body = body;
        self.push(name, Action::Send(r))
    }

    /// `GET path`.
    pub fn get(&mut self, name: &'static str, path: &str) -> &mut Step {
        self.send(name, "GET", path, None)
    }

    /// `POST path` with a JSON body.
    pub fn post(&mut self, name: &'static str, path: &str, body: Value) -> &mut Step {
        self.send(name, "POST", path, Some(Body::Json(body)))
    }

    /// `PUT path` with a JSON body.
    pub fn put(&mut self, name: &'static str, path: &str, body: Value) -> &mut Step {
        self.send(name, "PUT", path, Some(Body::Json(body)))
    }

    /// `PATCH path` with a body of the given content type.
    pub fn patch(
        &mut self,
        name: &'static str,
        path: &str,
        content_type: &str,
        body: Body,
    ) -> &mut Step {
        self.send(name, "PATCH", path, Some(body))
            .header("Content-Type", content_type)
    }

    /// `DELETE path` (optionally with a DeleteOptions body).
    pub fn delete(&mut self, name: &'static str, path: &str, body: Option<Value>) -> &mut Step {
        self.send(name, "DELETE", path, body.map(Body::Json))
    }

    /// Opens a watch (`GET path` with `watch=1` in its query).
    pub fn watch(&mut self, name: &'static str, id: &'static str, path: &str) -> &mut Step {
        let r = Request::new("GET", path);
        self.push(name, Action::Watch(id, r))
    }

    /// Collects events of watch `id`.
    pub fn events(&mut self, name: &'static str, id: &'static str, until: Until) -> &mut Step {
        self.push(
            name,
            Action::Events {
                watch: id,
                until,
                keep: Keep::All,
            },
        )
    }

    /// Sleeps.
    pub fn sleep(&mut self, name: &'static str, d: Duration) -> &mut Step {
        self.push(name, Action::Sleep(d))
    }
}

impl Step {
    fn request(&mut self) -> Option<&mut Request> {
        match &mut self.action {
            Action::Send(r) | Action::Watch(_, r) => Some(r),
            _ => None,
        }
    }

    /// Adds a request header.
    pub fn header(&mut self, name: &'static str, value: &str) -> &mut Self {
        if let Some(r) = self.request() {
            r.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            r.headers.push((name, value.to_string()));
        }
        self
    }

    /// Polls the request until `w` holds.
    pub fn wait(&mut self, w: Wait) -> &mut Self {
        if let Some(r) = self.request() {
            r.wait = Some(w);
        }
        self
    }

    /// What of the answer (or of each event) is compared.
    pub fn keep(&mut self, k: Keep) -> &mut Self {
        match &mut self.action {
            Action::Send(r) | Action::Watch(_, r) => r.keep = k,
            Action::Events { keep, .. } => *keep = k,
            Action::Sleep(_) => {}
        }
        self
    }

    /// Keeps only the named elements of an array before comparing.
    pub fn filter(&mut self, array: &'static str, key: &'static str, values: &[&str]) -> &mut Self {
        if let Some(r) = self.request() {
            r.filters.push(Filter {
                array,
                key,
                values: values.iter().map(|v| v.to_string()).collect(),
            });
        }
        self
    }

    /// Also compares these response headers (lower case).
    pub fn compare_header(&mut self, name: &'static str) -> &mut Self {
        if let Some(r) = self.request() {
            r.compare_headers.push(name);
        }
        self
    }

    /// Captures the string (or number) at `pointer` of the raw answer body
    /// as `{{var}}` for later steps.
    pub fn capture(&mut self, var: &'static str, pointer: &'static str) -> &mut Self {
        if let Some(r) = self.request() {
            r.captures.push((var, pointer));
        }
        self
    }

    /// Longest wait of this step.
    pub fn timeout(&mut self, d: Duration) -> &mut Self {
        self.timeout = d;
        self
    }
}
