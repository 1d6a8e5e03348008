//! Kubernetes helpers shared by the controller, the Ascend tasks and the
//! simulated cluster: time conversion, watch streams with reflector
//! semantics, job-kind discovery and the leader Lease.

pub mod discover;
pub mod leader;
pub mod time;
pub mod watch;
