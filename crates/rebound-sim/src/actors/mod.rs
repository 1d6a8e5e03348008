//! Simulated cluster actors: the parts of a Kubernetes cluster that are not
//! the API server (scheduler, kubelets, job operators, the Ascend device
//! plugin). They talk to the embedded API server only through `kube::Client`,
//! exactly like real controllers, so the server is exercised the same way
//! rebound's own controller exercises a real one.
//!
//! Every actor is one tokio task that keeps a compact in-memory view of the
//! objects it needs (not the full objects, so 20,000 pods stay cheap), batches
//! watch events, and issues its writes concurrently with a bounded number of
//! requests in flight.

pub mod ascend;
pub mod batchjob;
pub mod jobset;
pub mod kubeflow;
pub mod kubelet;
pub mod ratelimit;
pub mod scheduler;
pub mod trainer;
pub mod volcano;

mod children;
mod create;
mod jobstore;
mod runtime;
pub(crate) mod util;

pub use runtime::{ActorError, ActorTasks};
