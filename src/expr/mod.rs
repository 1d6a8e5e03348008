//! expr
