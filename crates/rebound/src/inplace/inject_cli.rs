//! The `rebound inject` command: read manifests (files, folders, stdin),
//! wire the job documents ([`super::inject`]) and write the same documents
//! out, so that `kubectl apply -f <(rebound inject -f job.yaml)` works.
//!
//! Documents are split on their `---` lines and parsed one by one (YAML
//! through serde-saphyr into `serde_json::Value`). A document that needs
//! no change is written back byte for byte, comments included; a changed
//! one is written from its value (keys sorted, comments gone: YAML has no
//! value type that keeps them). Nothing is written unless every document
//! could be handled, so a refused manifest never half-applies.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use super::inject::{DEFAULT_IMAGE, InjectOptions, inject_document, uninject_document};
use super::{DEFAULT_EXIT_CODE, DEFAULT_PROBE_PORT};

/// Flags of `rebound inject`.
#[derive(clap::Args, Debug, Clone)]
pub struct InjectArgs {
    /// Manifests to wire: a file, a folder (its *.yaml, *.yml and *.json
    /// files, sorted, not recursive) or `-` for standard input. Repeatable;
    /// the output keeps the order.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<PathBuf>,
    /// The agent's image (the rebound image; `rebound restart-agent` runs
    /// in it).
    #[arg(long, default_value = DEFAULT_IMAGE, env = "REBOUND_INJECT_IMAGE")]
    pub image: String,
    /// Exit code of the agent that the pods' `RestartAllContainers` rule
    /// matches (1-255, none the agent can fail with: not 1, 2, 101,
    /// 126-192 or 255; the controller reads it from the rule).
    #[arg(long, default_value_t = DEFAULT_EXIT_CODE)]
    pub exit_code: i32,
    /// Port of the agent's `/barrier` startup probe (must be free in the
    /// pod's network namespace).
    #[arg(long, default_value_t = DEFAULT_PROBE_PORT)]
    pub probe_port: u16,
    /// Write documents that cannot be wired unchanged, with a warning,
    /// instead of failing.
    #[arg(long)]
    pub ignore_unsupported: bool,
    /// Remove the agent instead of adding it.
    #[arg(long)]
    pub uninject: bool,
}

/// Why `rebound inject` failed; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// A file or folder could not be read.
    #[error("read {path}: {source}")]
    Read {
        /// The file, folder or `-`.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A document is not YAML.
    #[error("{source_name} document {index}: invalid YAML: {message}")]
    Yaml {
        /// The file (or `stdin`).
        source_name: String,
        /// 1-based position of the document in the file.
        index: usize,
        /// The parser's message.
        message: String,
    },
    /// A wired document could not be written as YAML.
    #[error("{doc}: cannot write YAML: {message}")]
    Write {
        /// The document.
        doc: String,
        /// The serializer's message.
        message: String,
    },
    /// A document's pod templates cannot carry the agent.
    #[error(transparent)]
    Refused(#[from] super::inject::DocRefusal),
    /// A flag is out of range.
    #[error("{0}")]
    Options(String),
}

/// What to do with each document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Add or update the agent; `ignore_unsupported` passes refused
    /// documents through with a warning.
    Inject {
        /// See [`InjectArgs::ignore_unsupported`].
        ignore_unsupported: bool,
    },
    /// Remove the agent.
    Uninject,
}

/// The result of one input (a file or stdin).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The documents, wired.
    pub yaml: String,
    /// Messages for the user (stderr).
    pub warnings: Vec<String>,
    /// Messages about job kinds, each once (stderr).
    pub caveats: std::collections::BTreeSet<String>,
    /// Pod templates wired (or unwired).
    pub templates: usize,
    /// Documents written changed.
    pub changed: usize,
}

/// One document of a YAML stream as it appeared.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Chunk {
    /// It started with a `---` line.
    separator: bool,
    /// Its text after that line (content on the `---` line included).
    body: String,
}

fn is_marker(line: &str, m: &str) -> bool {
    line.strip_prefix(m)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r']))
}

/// Split a YAML stream on its document markers. A `---` or `...` at the
/// start of a line is always a marker (YAML forbids them inside scalars
/// there), so this agrees with a parser.
fn split_documents(text: &str) -> Vec<Chunk> {
    let mut chunks = vec![Chunk {
        separator: false,
        body: String::new(),
    }];
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if is_marker(bare, "---") {
            let rest = bare[3..].trim_start();
            let mut body = String::new();
            if !rest.is_empty() {
                body.push_str(rest);
                body.push('\n');
            }
            chunks.push(Chunk {
                separator: true,
                body,
            });
        } else if is_marker(bare, "...") {
            // End of document: what follows until the next `---` is not
            // content.
        } else if let Some(last) = chunks.last_mut() {
            last.body.push_str(line);
        }
    }
    chunks
}

fn describe(doc: &Value, source: &str, index: usize) -> String {
    let kind = doc["kind"].as_str().unwrap_or("?");
    let name = doc["metadata"]["name"].as_str().unwrap_or("?");
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{source} document {index} ({kind} {ns}/{name})"),
        None => format!("{source} document {index} ({kind} {name})"),
    }
}

/// Apply `mode` to one document (or to each item of a `kind: List`).
fn handle(
    doc: &mut Value,
    name: &str,
    opts: &InjectOptions,
    mode: Mode,
    out: &mut Injected,
) -> Result<bool, InjectError> {
    let is_list =
        doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) && doc["items"].is_array();
    if is_list {
        let mut changed = false;
        if let Some(items) = doc["items"].as_array_mut() {
            for (i, item) in items.iter_mut().enumerate() {
                changed |= handle(item, &format!("{name} item {i}"), opts, mode, out)?;
            }
        }
        return Ok(changed);
    }
    match mode {
        Mode::Uninject => {
            let n = uninject_document(doc);
            out.templates += n;
            Ok(n > 0)
        }
        Mode::Inject { ignore_unsupported } => match inject_document(doc, opts, name) {
            Ok(r) => {
                out.templates += r.templates;
                out.warnings
                    .extend(r.warnings.into_iter().map(|w| format!("{name}: {w}")));
                out.caveats.extend(r.caveats);
                Ok(r.changed)
            }
            Err(e) if ignore_unsupported => {
                out.warnings
                    .push(format!("{e}; written unchanged (--ignore-unsupported)"));
                Ok(false)
            }
            Err(e) => Err(e.into()),
        },
    }
}

/// Wire every job document of one YAML stream.
pub fn inject_text(
    text: &str,
    source: &str,
    opts: &InjectOptions,
    mode: Mode,
) -> Result<Injected, InjectError> {
    opts.validate().map_err(InjectError::Options)?;
    let mut out = Injected::default();
    let mut index = 0;
    let mut pieces = Vec::new();
    for chunk in split_documents(text) {
        let parsed: Value = if chunk.body.trim().is_empty() {
            Value::Null
        } else {
            index += 1;
            serde_saphyr::from_str(&chunk.body).map_err(|e| InjectError::Yaml {
                source_name: source.to_string(),
                index,
                message: e.to_string(),
            })?
        };
        let mut doc = parsed;
        let name = describe(&doc, source, index);
        let changed = !doc.is_null() && handle(&mut doc, &name, opts, mode, &mut out)?;
        let body = if changed {
            out.changed += 1;
            serde_saphyr::to_string(&doc).map_err(|e| InjectError::Write {
                doc: name.clone(),
                message: e.to_string(),
            })?
        } else {
            chunk.body
        };
        pieces.push((chunk.separator, body));
    }
    for (i, (separator, body)) in pieces.into_iter().enumerate() {
        if separator || i > 0 {
            if !out.yaml.is_empty() && !out.yaml.ends_with('\n') {
                out.yaml.push('\n');
            }
            out.yaml.push_str("---\n");
        }
        out.yaml.push_str(&body);
    }
    Ok(out)
}

/// The inputs named on the command line, in order: `(name, text)`.
fn read_inputs(paths: &[PathBuf]) -> Result<Vec<(String, String)>, InjectError> {
    let read_err = |p: &Path| {
        let path = p.display().to_string();
        move |source| InjectError::Read { path, source }
    };
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(read_err(p))?;
            out.push(("stdin".to_string(), s));
            continue;
        }
        let meta = std::fs::metadata(p).map_err(read_err(p))?;
        if meta.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(read_err(p))?
                .flatten()
                .map(|e| e.path())
                .filter(|f| {
                    f.is_file()
                        && matches!(
                            f.extension().and_then(|x| x.to_str()),
                            Some("yaml" | "yml" | "json")
                        )
                })
                .collect();
            files.sort();
            for f in files {
                let text = std::fs::read_to_string(&f).map_err(read_err(&f))?;
                out.push((f.display().to_string(), text));
            }
        } else {
            let text = std::fs::read_to_string(p).map_err(read_err(p))?;
            out.push((p.display().to_string(), text));
        }
    }
    Ok(out)
}

/// Run `rebound inject`: the wired manifests on stdout, warnings and a
/// summary on stderr; on any error nothing on stdout and exit code 1.
pub fn run(args: InjectArgs) -> ExitCode {
    let opts = InjectOptions {
        image: args.image,
        exit_code: args.exit_code,
        probe_port: args.probe_port,
    };
    let mode = if args.uninject {
        Mode::Uninject
    } else {
        Mode::Inject {
            ignore_unsupported: args.ignore_unsupported,
        }
    };
    match inject_all(&args.files, &opts, mode) {
        Ok(all) => {
            for w in all.caveats.iter().chain(&all.warnings) {
                eprintln!("warning: {w}");
            }
            let verb = if args.uninject { "unwired" } else { "wired" };
            eprintln!(
                "rebound inject: {} pod template(s) {verb}, {} document(s) changed",
                all.templates, all.changed
            );
            print!("{}", all.yaml);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// All inputs, joined into one stream in order.
pub fn inject_all(
    paths: &[PathBuf],
    opts: &InjectOptions,
    mode: Mode,
) -> Result<Injected, InjectError> {
    let mut all = Injected::default();
    for (name, text) in read_inputs(paths)? {
        let one = inject_text(&text, &name, opts, mode)?;
        if !all.yaml.is_empty() && !one.yaml.trim().is_empty() {
            if !all.yaml.ends_with('\n') {
                all.yaml.push('\n');
            }
            all.yaml.push_str("---\n");
        }
        all.yaml.push_str(&one.yaml);
        all.warnings.extend(one.warnings);
        all.caveats.extend(one.caveats);
        all.templates += one.templates;
        all.changed += one.changed;
    }
    Ok(all)
}

#[cfg(test)]
mod tests;
