//! rebound: detect GPU/NPU, node and process faults under AI training jobs and
//! recover them at once. See `docs/` for the user guide and `DESIGN.md` in the
//! shared folder for the contract.
//!
//! The decision core (`fault` → `classify` → `policy`) is pure: no I/O, so it
//! is tested and benchmarked alone. I/O lives in `controller`, `recover`,
//! `agent` and `sim`.

pub mod agent;
pub mod api;
pub mod ascend;
pub mod classify;
pub mod controller;
pub mod explain;
pub mod expr;
pub mod fault;
pub mod inplace;
pub mod k8s;
pub mod metrics;
pub mod policy;
pub mod recover;
pub mod sim;
pub mod workload;
