//! HCCL-Controller's rank tables, built by rebound (issue #7): for jobs
//! labelled `ring-controller.atlas: ascend-910` (Volcano Jobs, batch Jobs,
//! Deployments), the `hccl.json` key of the job's `rings-config-<job>`
//! ConfigMap lists every pod's chips once all pods are known
//! (`completed`), goes back to `initializing` when pods go, and is rebuilt
//! as their replacements get their chips. A job rebound restarted is
//! reported recovered only once its table is complete again.
//!
//! `table` and `recovery` are pure; `objects` trims watched objects;
//! `controller` is the task with the watches and the writes.

pub mod controller;
pub mod objects;
pub mod recovery;
pub mod table;

pub use controller::{Deps, spawn};
pub use table::Format;
