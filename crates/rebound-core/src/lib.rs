//! rebound-core: the API types and the pure decision core of rebound.
//!
//! `fault` → `classify` → `policy` decide what to do about a fault; `api`
//! holds the CRDs (FaultClassification, RecoveryPolicy) they read, `expr`
//! the CEL they compile, `workload` the job kinds they know, `explain` the
//! offline `rebound explain` over them. No I/O, no tokio, no Kubernetes
//! client: the crate builds and tests alone, and the operator (`rebound`)
//! and the simulator (`rebound-sim`) build on it. See README.md.

pub mod api;
pub mod classify;
pub mod explain;
pub mod expr;
pub mod fault;
pub mod policy;
pub mod samples;
pub mod workload;
