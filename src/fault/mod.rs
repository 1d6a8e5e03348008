//! The fault model shared by every source, and each source's parser.

pub mod wire;
