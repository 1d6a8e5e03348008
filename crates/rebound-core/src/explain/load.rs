//! Load FaultClassification and RecoveryPolicy objects from YAML files or
//! folders, with errors that name the file, the object and the field.

// Load errors name the file, the object and the field for a person reading
// a CLI message; they are rare and never on a hot path, so their size does
// not matter.
#![allow(clippy::result_large_err)]

use crate::api::{FaultClassification, RecoveryPolicy};
use std::path::{Path, PathBuf};

/// The objects found in a set of files.
#[derive(Debug, Default)]
pub struct Loaded {
    pub classifications: Vec<(PathBuf, FaultClassification)>,
    pub policies: Vec<(PathBuf, RecoveryPolicy)>,
}

/// A file that cannot be used; the message is for the person who wrote it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: invalid YAML: {message}")]
    Yaml { path: PathBuf, message: String },
    #[error("{path}: {kind} {name}: field {field}: {message}")]
    Invalid {
        path: PathBuf,
        kind: String,
        name: String,
        field: String,
        message: String,
    },
    #[error("{path}: document {index} ({kind} {name}): field {field}: {message}")]
    Field {
        path: PathBuf,
        index: usize,
        kind: String,
        name: String,
        field: String,
        message: String,
    },
}

/// Load every `.yaml`/`.yml` file under `paths` (files or folders).
/// Documents of other kinds are skipped, so a folder of mixed manifests
/// works.
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, LoadError> {
    let mut files = Vec::new();
    for p in paths {
        collect(p, &mut files)?;
    }
    files.sort();
    let mut out = Loaded::default();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| LoadError::Read {
            path: f.clone(),
            source,
        })?;
        load_str(&f, &text, &mut out)?;
    }
    Ok(out)
}

fn collect(p: &Path, files: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let meta = std::fs::metadata(p).map_err(|source| LoadError::Read {
        path: p.to_path_buf(),
        source,
    })?;
    if meta.is_dir() {
        let rd = std::fs::read_dir(p).map_err(|source| LoadError::Read {
            path: p.to_path_buf(),
            source,
        })?;
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                collect(&path, files)?;
            } else if matches!(
                path.extension().and_then(|x| x.to_str()),
                Some("yaml" | "yml")
            ) {
                files.push(path);
            }
        }
    } else {
        files.push(p.to_path_buf());
    }
    Ok(())
}

/// Load the documents of one YAML text (named `path` in errors).
pub fn load_str(path: &Path, text: &str, out: &mut Loaded) -> Result<(), LoadError> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| LoadError::Yaml {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let kind = doc
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let api = doc.get("apiVersion").and_then(|k| k.as_str()).unwrap_or("");
        if !api.starts_with("rebound.dev/") {
            continue;
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("<unnamed>")
            .to_string();
        let field_err = |field: String, message: String| LoadError::Field {
            path: path.to_path_buf(),
            index: i + 1,
            kind: kind.clone(),
            name: name.clone(),
            field,
            message,
        };
        match kind.as_str() {
            "FaultClassification" => {
                let obj: FaultClassification = typed(doc).map_err(|(f, m)| field_err(f, m))?;
                out.classifications.push((path.to_path_buf(), obj));
            }
            "RecoveryPolicy" => {
                let obj: RecoveryPolicy = typed(doc).map_err(|(f, m)| field_err(f, m))?;
                out.policies.push((path.to_path_buf(), obj));
            }
            other => {
                return Err(field_err(
                    "kind".into(),
                    format!("unknown rebound.dev kind {other:?}"),
                ));
            }
        }
    }
    Ok(())
}

fn typed<T: serde::de::DeserializeOwned>(doc: serde_json::Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let field = e.path().to_string();
        (field, e.into_inner().to_string())
    })
}
