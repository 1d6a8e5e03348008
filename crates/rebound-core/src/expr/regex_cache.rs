//! CEL's `matches`, with each pattern compiled once.
//!
//! cel 0.15's own `matches` compiles its pattern on every evaluation:
//! measured (regex 1.13.2, release, 2 cores) 4 µs for `abc`, 11 µs for
//! `^8`, 26 µs for `to 0x0*[135]\b`, 385 µs for `(a{40}){40}`, 536 µs for a
//! Unicode `\w+`, so a `matches` inside a comprehension cost a compile per
//! element and the cost estimate (which charges a scan) undercounted it by
//! orders of magnitude: `[0..53].all(a, [0..53].all(b,
//! !'x'.matches('(a{40}){40}')))` was accepted and took about a second per
//! evaluation (issue 27). Here a pattern is compiled once, under the same
//! size limit the compile-time check applies ([`REGEX_SIZE_MAX`]), and kept
//! for later evaluations; what an evaluation then pays is the scan the
//! estimate charges.

use super::cost::REGEX_SIZE_MAX;
use cel::ExecutionError;
use cel::common::types::{CelBool, CelString};
use regex::{Regex, RegexBuilder};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// Patterns kept at most. Only literal patterns pass the compile-time
/// check, so this is the number of distinct patterns in the policies and
/// classifications; past it the cache starts again (never unbounded).
const KEPT: usize = 1024;

static CACHE: LazyLock<Mutex<HashMap<String, Arc<Regex>>>> = LazyLock::new(Mutex::default);
static COMPILES: AtomicU64 = AtomicU64::new(0);

/// Patterns compiled so far (tests: a pattern is compiled once).
pub fn compiles() -> u64 {
    COMPILES.load(Ordering::Relaxed)
}

fn compiled(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    if let Some(r) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(r.clone());
    }
    COMPILES.fetch_add(1, Ordering::Relaxed);
    let r = Arc::new(
        RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_MAX)
            .build()?,
    );
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= KEPT {
        cache.clear();
    }
    cache.insert(pattern.to_string(), r.clone());
    Ok(r)
}

fn matches(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    match compiled(re.inner()) {
        Ok(r) => Ok(CelBool::from(r.is_match(this.inner()))),
        Err(err) => Err(ExecutionError::FunctionError {
            function: "matches".to_string(),
            message: format!("'{}' not a valid regex:\n{err}", re.inner()),
        }),
    }
}

/// `env` with `matches(s, re)` and `s.matches(re)` (the overloads cel's
/// `regex` feature would register, which rebound leaves off).
pub fn with_matches(mut env: cel::Env) -> cel::Env {
    // Declared once on a fresh environment without cel's own `matches`:
    // a conflict is a build mistake, found by every test that compiles
    // an expression.
    cel::add_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>, id = "matches")
        .expect("matches(string, string) declared once");
    cel::add_member_overload!(env, fn matches: (CelString, CelString) -> Result<CelBool>)
        .expect("string.matches(string) declared once");
    env
}
