//! Core tests (see property.rs).
