//! The fault model shared by every source, and each source's parser.

mod level;
mod model;
pub mod wire;

pub use level::{FaultSource, Level};
pub use model::{Classified, Fault};
