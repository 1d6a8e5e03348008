//! The handle's direct in-process path, bypassing HTTP and the request
//! log: CRD registration from YAML and bulk creates and reads for setup
//! at scale, with the same admission as requests.

use serde_json::{Value, json};

use crate::server::errors::{ApiError, SimError};
use crate::server::http::{self, Route};
use crate::server::ops::{Loc, WriteOpts};

use super::{ApiServerHandle, HandleCore};

impl HandleCore<'_> {
    pub(super) fn ensure_namespace(&self, ns: &str) -> Result<(), SimError> {
        let loc = self.loc("/api/v1/namespaces")?;
        if self.0.store.read().get(&loc.key, "", ns).is_some() {
            return Ok(());
        }
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        self.0
            .create(
                &loc,
                body,
                &WriteOpts {
                    manager: "rebound-sim".into(),
                    ..WriteOpts::default()
                },
            )
            .map(|_| ())
            .map_err(|e| SimError::Api {
                what: format!("creating namespace {ns}"),
                source: e,
            })
    }

    fn loc(&self, path: &str) -> Result<Loc, SimError> {
        match http::parse_path(self.0, path) {
            Route::Resource(l) => Ok(l),
            _ => Err(SimError::Api {
                what: format!("resolving {path}"),
                source: ApiError::unknown_path(path),
            }),
        }
    }
}

fn collection_path(api_version: &str, plural: &str, ns: Option<&str>) -> String {
    let prefix = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    match ns {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
        None => format!("{prefix}/{plural}"),
    }
}

impl ApiServerHandle {
    /// Registers CRDs from YAML (multi-document; non-CRD documents are an
    /// error). Existing CRDs of the same name are replaced. Returns the
    /// registered names.
    pub async fn register_crds_yaml(&self, yaml: &str) -> Result<Vec<String>, SimError> {
        let docs = split_documents(yaml)?;
        let core = HandleCore(&self.inner.shared);
        let loc = core.loc("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")?;
        let mut names = Vec::new();
        for (index, doc) in docs {
            if doc.is_null() {
                continue;
            }
            let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
            if kind != "CustomResourceDefinition" {
                return Err(SimError::Yaml {
                    index,
                    message: format!("expected a CustomResourceDefinition, got kind {kind:?}"),
                });
            }
            let name = doc
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let opts = WriteOpts {
                manager: "rebound-sim".into(),
                ..WriteOpts::default()
            };
            let existing = self.inner.shared.store.read().get(&loc.key, "", &name);
            let result = match existing {
                None => self.inner.shared.create(&loc, doc, &opts),
                Some(old) => {
                    let mut doc = doc;
                    doc["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                    let named = Loc {
                        name: Some(name.clone()),
                        ..loc.clone()
                    };
                    self.inner.shared.update(&named, doc, &opts)
                }
            };
            result.map_err(|e| SimError::Api {
                what: format!("registering CRD {name}"),
                source: e,
            })?;
            names.push(name);
        }
        Ok(names)
    }

    /// Creates an object in-process, bypassing HTTP (and the request log):
    /// for bulk setup at scale. `path` is the collection path, e.g.
    /// `/api/v1/namespaces/default/pods`. Same admission as a POST.
    pub fn create_json(&self, path: &str, value: Value) -> Result<Value, SimError> {
        let loc = HandleCore(&self.inner.shared).loc(path)?;
        let opts = WriteOpts {
            manager: "rebound-sim".into(),
            ..WriteOpts::default()
        };
        self.inner
            .shared
            .create(&loc, value, &opts)
            .map(|r| r.body)
            .map_err(|e| SimError::Api {
                what: format!("creating at {path}"),
                source: e,
            })
    }

    /// Creates an object in-process from its `apiVersion`, `kind` and
    /// `metadata.namespace` (bypassing HTTP, like `create_json`).
    pub fn create_object(&self, value: Value) -> Result<Value, SimError> {
        let av = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let (group, version) = av.rsplit_once('/').unwrap_or(("", av.as_str()));
        let res = self
            .inner
            .shared
            .registry_snapshot()
            .all()
            .find(|r| r.group == group && r.kind == kind && r.versions.iter().any(|v| v == version))
            .cloned()
            .ok_or_else(|| SimError::Api {
                what: format!("creating {av} {kind}"),
                source: ApiError::unknown_path(&kind),
            })?;
        let ns = value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let path = collection_path(&av, &res.plural, res.namespaced.then_some(ns));
        self.create_json(&path, value)
    }

    /// Creates a namespace in-process if it does not exist (the API itself
    /// requires namespaces to exist, like a real server).
    pub fn ensure_namespace(&self, ns: &str) -> Result<(), SimError> {
        HandleCore(&self.inner.shared).ensure_namespace(ns)
    }

    /// Reads an object in-process (`path` names it, e.g.
    /// `/api/v1/namespaces/default/pods/p`); None when absent.
    pub fn get_json(&self, path: &str) -> Option<Value> {
        let loc = HandleCore(&self.inner.shared).loc(path).ok()?;
        self.inner.shared.get(&loc).ok().map(|r| r.body)
    }

    /// Number of stored objects of a resource (`group/plural`, core group
    /// empty: `/pods`).
    pub fn object_count(&self, key: &str) -> usize {
        self.inner.shared.store.read().count(key)
    }

    /// Every stored Event in its `events.k8s.io/v1` form, read in-process
    /// (no request logged, no injected fault): what the test bed's check of
    /// restart endings reads.
    pub fn events_v1(&self) -> Vec<Value> {
        self.inner
            .shared
            .store
            .read()
            .iter("/events", None)
            .map(|(_, o)| crate::server::events::core_to_v1(o))
            .collect()
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.shared.store.read().rv()
    }
}

/// Parses a multi-document YAML string one document at a time, so that an
/// error names the document (0-based); empty documents are skipped.
fn split_documents(yaml: &str) -> Result<Vec<(usize, Value)>, SimError> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut pieces = Vec::new();
    for line in yaml.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            pieces.push(std::mem::take(&mut current));
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    pieces.push(current);
    for (index, piece) in pieces.iter().enumerate() {
        let meaningful = piece.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        });
        if !meaningful {
            continue;
        }
        let v: Value = serde_saphyr::from_str(piece).map_err(|e| SimError::Yaml {
            index,
            message: e.to_string(),
        })?;
        docs.push((index, v));
    }
    Ok(docs)
}
