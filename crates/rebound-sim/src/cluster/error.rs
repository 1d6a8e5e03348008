//! Why a simulated-cluster call fails.

use std::time::Duration;

use crate::SimError;
use crate::actors::ActorError;

/// Why a simulated-cluster call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The embedded API server failed (start, CRDs, bulk setup).
    #[error("embedded API server: {0}")]
    Server(#[from] SimError),
    /// An actor's operation failed (fault injection).
    #[error(transparent)]
    Actor(#[from] ActorError),
    /// A request through the client failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be built.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A wait ran out of time.
    #[error("timed out after {after:?}: {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
    },
    /// The cluster was not set up for this (e.g. Ascend faults on GPU nodes).
    #[error("{0}")]
    Unsupported(String),
}
