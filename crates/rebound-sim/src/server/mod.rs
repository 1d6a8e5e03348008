//! The embedded Kubernetes API server: an in-memory server speaking the
//! real Kubernetes HTTP API on loopback, so the unchanged operator (through
//! `kube`) and `kubectl` run against it as against a real cluster. See
//! `docs/embedded-cluster.md` for what it serves and every known
//! difference from a real kube-apiserver.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rebound_sim::server::SimError> {
//! use rebound_sim::server::ApiServer;
//! let handle = ApiServer::builder().start().await?;
//! let client = handle.client();
//! # let _ = client; Ok(()) }
//! ```

pub mod apply;
pub mod commit;
pub mod conformance;
pub mod controllers;
pub mod crd;
pub mod create;
pub mod defaults;
pub mod delete;
pub mod discovery;
pub mod errors;
pub mod events;
pub mod http;
pub mod inject;
pub mod kindcheck;
pub mod list;
pub mod log;
pub mod openapi;
pub mod ops;
pub mod options;
pub mod patch;
pub mod podcheck;
pub mod podrules;
pub mod pods;
pub mod quantity;
pub mod render;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod state;
pub mod store;
pub mod table;
pub mod validate;
pub mod watch;
pub mod work;
pub mod write;

mod handle;

pub use errors::{ApiError, SimError};
pub use handle::{ApiServer, ApiServerHandle};
pub use inject::FaultInjector;
pub use log::RequestRecord;
pub use state::ServerOptions;
