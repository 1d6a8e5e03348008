//! The embedded cluster: an in-memory Kubernetes API server on loopback with
//! simulated nodes, kubelets and job operators, so the unchanged controller
//! can be seen, tested and measured without a real cluster.

pub mod actors;
pub mod cluster;
pub mod server;

pub use server::{ApiServer, ApiServerHandle, FaultInjector, RequestRecord, SimError};
pub mod bare;
pub mod bench;
pub mod demo;
pub mod envtest;
pub mod kubelet_logs;
pub mod proxy;
pub mod samples;
pub mod testbed;
