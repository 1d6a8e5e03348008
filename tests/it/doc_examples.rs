//! The docs' examples, run as tests.
//!
//! Every fenced block of the documents in [`DOCS`], every inline CEL example
//! of docs/cel.md and docs/concepts.md (a code span that is a policy
//! expression with an operator or a call, or one the compiler refuses for
//! another reason than syntax: `job.restartz`) and every inline command
//! (`rebound …` or `cargo run … -- …` with flags) has a [`Case`], keyed by
//! its exact text. A case runs the example where it can run without a
//! cluster (`rebound explain` through its own argument parser and code,
//! the binary, the chart and kustomize renders) and asserts what the text
//! around it says; where it cannot (a cluster, Docker, the test suite
//! itself) it checks what can be checked offline (files, flags, names) and
//! says why. An example without a case fails, and so does a case whose
//! example is gone: a doc example that stops being true fails CI.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use rebound::expr::{CompileError, Expr, POLICY_VARS};
use std::collections::BTreeSet;
use std::path::PathBuf;

mod cases;
mod cel;
mod commands;
mod explain;
mod findings;
mod samples;

/// The documents whose examples must run.
const DOCS: [&str; 5] = [
    "README.md",
    "docs/getting-started.md",
    "docs/cel.md",
    "docs/concepts.md",
    "samples/README.md",
];

/// Documents whose inline code spans may be CEL examples.
const CEL_DOCS: [&str; 2] = ["docs/cel.md", "docs/concepts.md"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// One example of a document.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Example {
    doc: &'static str,
    /// The fence's language (`sh`, `cel`, `yaml`, `` for none), or
    /// `inline` for a code span.
    lang: String,
    text: String,
}

/// Fenced blocks and code spans, as a Markdown reader finds them.
fn blocks_and_spans(doc: &'static str) -> (Vec<Example>, Vec<String>) {
    let text = read(doc);
    let mut blocks = Vec::new();
    let mut spans = Vec::new();
    let mut open: Option<(String, String)> = None;
    for ev in Parser::new(&text) {
        match ev {
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(l) => l.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                open = Some((lang, String::new()));
            }
            Event::Text(t) => {
                if let Some((_, buf)) = &mut open {
                    buf.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((lang, buf)) = open.take() {
                    blocks.push(Example {
                        doc,
                        lang,
                        text: buf.trim_end().to_string(),
                    });
                }
            }
            Event::Code(c) => spans.push(c.to_string()),
            _ => {}
        }
    }
    (blocks, spans)
}

/// Whether an inline span is a CEL example rather than the name of a
/// field, function, label, path or range: an expression over the policy
/// variables with an operator, a function call with arguments, a quoted
/// expression as a YAML field holds it (`'1 == 2'`), or one the compiler
/// refuses for what it says (`job.restartz`: no such field).
fn is_cel_example(span: &str) -> bool {
    let operator = regex::Regex::new(r#"==|!=|<|>|&&|\|\||[+*/%?!-]| in "#).expect("regex");
    let call = regex::Regex::new(r#"\w\(\s*[^)\s]"#).expect("regex");
    let quoted = span.len() > 2 && span.starts_with('\'') && span.ends_with('\'');
    match Expr::compile(span, POLICY_VARS) {
        Ok(e) => {
            call.is_match(span)
                || (operator.is_match(span) && (quoted || e.vars() != Default::default()))
        }
        Err(CompileError::Syntax(_) | CompileError::UnknownVariable { .. }) => false,
        Err(_) => true,
    }
}

/// Whether an inline span is a command line.
fn is_command(span: &str) -> bool {
    (span.starts_with("rebound ") || span.starts_with("cargo run"))
        && (span.contains(" --") || span.contains(" -f "))
}

/// Every example of every document in [`DOCS`].
fn examples() -> BTreeSet<Example> {
    let mut out = BTreeSet::new();
    for doc in DOCS {
        let (blocks, spans) = blocks_and_spans(doc);
        out.extend(blocks);
        for s in spans {
            let s = s.trim().to_string();
            if (CEL_DOCS.contains(&doc) && is_cel_example(&s)) || is_command(&s) {
                out.insert(Example {
                    doc,
                    lang: "inline".into(),
                    text: s,
                });
            }
        }
    }
    out
}

#[test]
fn every_doc_example_has_a_case_and_every_case_an_example() {
    let found = examples();
    assert!(found.len() >= 40, "only {} examples found", found.len());
    let cases = cases::all();
    let keys: BTreeSet<(&str, &str)> = cases.iter().map(|c| (c.doc, c.example)).collect();
    assert_eq!(keys.len(), cases.len(), "a case is listed twice");
    let missing: Vec<String> = found
        .iter()
        .filter(|e| !keys.contains(&(e.doc, e.text.as_str())))
        .map(|e| format!("{} ({}):\n{}\n", e.doc, e.lang, e.text))
        .collect();
    assert!(
        missing.is_empty(),
        "examples without a case in tests/it/doc_examples/cases.rs:\n{}",
        missing.join("\n")
    );
    let stale: Vec<String> = cases
        .iter()
        .filter(|c| !found.iter().any(|e| e.doc == c.doc && e.text == c.example))
        .map(|c| format!("{}:\n{}\n", c.doc, c.example))
        .collect();
    assert!(
        stale.is_empty(),
        "cases whose example is no longer in its document:\n{}",
        stale.join("\n")
    );
}

/// docs/benchmarks.md is not a document of examples (its tables hold the
/// commands of each run), but the commands of its fenced blocks must work:
/// the bench exists, the binary's flags parse, the example is there.
#[test]
fn benchmark_commands_name_what_exists() {
    let (blocks, _) = blocks_and_spans("docs/benchmarks.md");
    let sh: Vec<&Example> = blocks.iter().filter(|b| b.lang == "sh").collect();
    assert!(!sh.is_empty(), "docs/benchmarks.md has no command block");
    for b in sh {
        commands::measure(&b.text);
    }
}

#[test]
fn every_cel_example_runs_as_its_text_says() {
    run_cases(|c| c.kind == cases::Kind::Cel);
}

#[test]
fn every_command_and_file_example_runs_or_is_checked_offline() {
    run_cases(|c| c.kind != cases::Kind::Cel);
}

fn run_cases(which: impl Fn(&cases::Case) -> bool) {
    let mut ran = 0;
    for c in cases::all().iter().filter(|c| which(c)) {
        let r = std::panic::catch_unwind(|| (c.check)(c.example));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let offline = c
                .why
                .map(|w| format!(" (checked offline: {w})"))
                .unwrap_or_default();
            panic!(
                "{}: example\n{}\ndoes not hold{offline}: {msg}",
                c.doc, c.example
            );
        }
        ran += 1;
    }
    assert!(ran >= 10, "only {ran} cases ran");
}

#[test]
fn every_sample_policy_does_what_its_comments_say() {
    let mut files: Vec<String> = std::fs::read_dir(root().join("samples/policies"))
        .expect("samples/policies")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    let checks = samples::all();
    let mut listed: Vec<String> = checks.iter().map(|(f, _)| f.to_string()).collect();
    listed.sort();
    assert_eq!(
        files, listed,
        "every sample policy has a check in tests/it/doc_examples/samples.rs"
    );
    for (_, check) in checks {
        check();
    }
}
