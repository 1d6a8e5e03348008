//! classify
