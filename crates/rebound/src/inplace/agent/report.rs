//! What the runner reports to its sink: the verdict, why it changed, and
//! the request counts, with the one-line form the restart agent logs.

use std::fmt;

use super::super::{Generation, Verdict};

/// Why the verdict changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The first read of the job fixed this run's generation.
    FirstRead,
    /// The job's generation annotations changed.
    Generation,
    /// The job could not be read for `fail_open_after`; the last error.
    FailOpen(String),
}

/// A change of the agent's verdict, as the sink receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The new verdict.
    pub verdict: Verdict,
    /// The job's generation as last read (`None` when failing open without
    /// ever having read it).
    pub observed: Option<Generation>,
    /// The generation this run of the agent belongs to, once known.
    pub generation: Option<u64>,
    /// Why.
    pub cause: Cause,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let obs = |f: &mut fmt::Formatter<'_>| match self.observed {
            Some(g) => write!(
                f,
                "job at generation {}, released {}",
                g.current, g.released
            ),
            None => write!(f, "job never read"),
        };
        match (&self.verdict, &self.cause) {
            (_, Cause::FailOpen(why)) => {
                write!(
                    f,
                    "barrier opened without reading the job (fail-open): {why}"
                )
            }
            (Verdict::Hold, _) => {
                write!(
                    f,
                    "barrier holds for generation {}: ",
                    self.generation.unwrap_or(0)
                )?;
                obs(f)
            }
            (Verdict::Open, _) => {
                write!(
                    f,
                    "barrier open for generation {}: ",
                    self.generation.unwrap_or(0)
                )?;
                obs(f)
            }
            (Verdict::Exit, _) => {
                write!(
                    f,
                    "pod behind: this run belongs to generation {}, ",
                    self.generation.unwrap_or(0)
                )?;
                obs(f)?;
                write!(f, "; exiting so that the pod restarts in place")
            }
        }
    }
}
