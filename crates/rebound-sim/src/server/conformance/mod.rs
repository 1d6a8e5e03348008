//! Differential conformance of the embedded API server: scenarios of
//! requests that the controller, `kubectl` and the simulated actors make,
//! recorded once from a real kube-apiserver (`cargo run --example
//! record_conformance`, into `tests/conformance/recorded/`) and replayed
//! against the embedded server by the test `conformance` (in `cargo test`),
//! which fails on every difference not accepted in
//! `tests/conformance/known-differences.yaml` and on every accepted one
//! that no longer occurs. The recorder and the replay run the same
//! [`Scenario`] values; answers are selected and normalised
//! ([`normalise`]) before they are written or compared.

pub mod diff;
pub mod normalise;
pub mod runner;
pub mod scenario;
pub mod scenarios;
pub mod select;

pub use diff::{Difference, Known, parse_known};
pub use runner::{Recording, RunError, StepRecord, run};
pub use scenario::{Scenario, Wait};
pub use scenarios::all;

/// The `shared` folder with the real job CRDs: `REBOUND_SHARED_DIR` if
/// set, else `../shared` beside the project (as CI lays it out). `None`
/// when absent.
pub fn shared_dir() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("REBOUND_SHARED_DIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(crate::PROJECT_ROOT).join("../shared"));
    dir.is_dir().then_some(dir)
}

/// The differences between a recording and the embedded server's run of
/// the same scenario. A step missing on either side, or made from another
/// request, is one difference at `/request`.
pub fn compare(rec: &Recording, embedded: &[StepRecord]) -> Vec<Difference> {
    let mut out = Vec::new();
    let mk = |step: &str, path: String, real, emb| Difference {
        scenario: rec.scenario.clone(),
        step: step.to_string(),
        path,
        real,
        embedded: emb,
    };
    let n = rec.steps.len().max(embedded.len());
    for i in 0..n {
        match (rec.steps.get(i), embedded.get(i)) {
            (Some(r), Some(e)) if r.step == e.step && r.request == e.request => {
                let mut d = Vec::new();
                diff::diff(&r.answer, &e.answer, "/answer", &mut d);
                out.extend(d.into_iter().map(|(p, a, b)| mk(&r.step, p, a, b)));
            }
            (r, e) => {
                let step = r.or(e).map(|s| s.step.clone()).unwrap_or_default();
                out.push(mk(
                    &step,
                    "/request".into(),
                    r.map(|s| serde_json::json!(format!("{}: {}", s.step, s.request))),
                    e.map(|s| serde_json::json!(format!("{}: {}", s.step, s.request))),
                ));
            }
        }
    }
    out
}

/// What the replay found against the accepted list.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Differences no entry accepts.
    pub unlisted: Vec<Difference>,
    /// Entries (by index) that accepted no difference: no longer true.
    pub stale: Vec<usize>,
}

/// Sorts differences into accepted and not, and finds stale entries.
/// `ran` are the scenarios that ran: entries of other scenarios are not
/// judged (a filtered run).
pub fn judge(diffs: &[Difference], known: &[Known], ran: &[&str]) -> Verdict {
    let mut used = vec![false; known.len()];
    let mut v = Verdict::default();
    for d in diffs {
        let mut hit = false;
        for (i, k) in known.iter().enumerate() {
            if k.covers(d) {
                used[i] = true;
                hit = true;
            }
        }
        if !hit {
            v.unlisted.push(d.clone());
        }
    }
    for (i, k) in known.iter().enumerate() {
        let judged = ran.iter().any(|s| diff::glob(&k.scenario, s));
        if judged && !used[i] {
            v.stale.push(i);
        }
    }
    v
}
