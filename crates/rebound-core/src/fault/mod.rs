//! The fault model shared by every source, and each source's parser.

pub mod ascend;
pub mod event;
mod level;
mod model;
pub mod node;
pub mod pod;
mod trust;
pub mod wire;

pub use level::{FaultSource, Level};
pub use model::{Classified, Fault};
pub use trust::Domain;
