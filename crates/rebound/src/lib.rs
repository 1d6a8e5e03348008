//! rebound: detect GPU/NPU, node and process faults under AI training jobs and
//! recover them at once. See `docs/` for the user guide and `DESIGN.md` in the
//! shared folder for the contract.
//!
//! The decision core (`fault` → `classify` → `policy`) is pure and lives in
//! the `rebound-core` crate, re-exported here so that `rebound::api::…` and
//! the like name one thing. I/O lives in this crate: `controller`,
//! `recover`, `agent`, `inplace`, `ascend`. The simulator is the
//! `rebound-sim` crate, which this one never imports. See README.md.

pub use rebound_core::{api, classify, explain, expr, fault, policy, samples, workload};

pub mod agent;
pub mod ascend;
pub mod controller;
pub mod inplace;
pub mod k8s;
pub mod metrics;
pub mod recover;
