//! The node agent: turns what a node knows about its accelerators (kernel log,
//! NVML, DCGM, npu-smi) into Node conditions and Events the controller reads.
//!
//! Sources (`kmsg`, `nvml`, `dcgm`, `npusmi`) produce [`fault::AgentFault`]s;
//! `supervise` keeps them running (restarts with `backoff`), `health` says
//! how each fares on `/healthz`; `state` folds repeats and applies the quiet
//! period; `pod_resources` asks the kubelet which pods hold a faulty GPU;
//! `report` writes Node conditions and Events; `run` wires them.
//! See `docs/agent.md`.

pub mod args;
pub mod backoff;
pub mod cmd;
pub mod dcgm;
pub mod dcgm_exporter;
pub mod fault;
pub mod health;
pub mod kmsg;
pub mod metrics;
pub mod npusmi;
pub mod nvml;
pub mod pci;
pub mod pod_resources;
pub mod report;
pub mod run;
pub mod sources;
pub mod state;
pub mod supervise;
pub mod xid;

pub use args::AgentArgs;
pub use run::{DryRunReport, ReportedFault, dry_run, run, run_with_client};
