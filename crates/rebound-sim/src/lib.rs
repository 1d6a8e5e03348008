//! rebound-sim, the embedded cluster: an in-memory Kubernetes API server on
//! loopback with simulated nodes, kubelets and job operators, so the
//! unchanged controller can be seen, tested and measured without a real
//! cluster; and the test bed, the bench and `rebound demo`. Uses `rebound`
//! (the operator it runs) and `rebound-core`; the operator never imports
//! it. See README.md.

pub mod actors;
pub mod cluster;
pub mod server;

pub use server::{ApiServer, ApiServerHandle, FaultInjector, RequestRecord, SimError};
pub mod bare;
pub mod bench;
pub mod components;
pub mod demo;
pub mod envtest;
pub mod kubelet_logs;
pub mod proxy;
pub mod testbed;

/// The repository's root (the workspace), where the test bed finds
/// `../shared` and `tools/real-components`: two levels above this crate's
/// manifest.
pub const PROJECT_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
