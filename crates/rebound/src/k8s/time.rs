//! jiff (k8s-openapi) ↔ chrono (core, CEL) at the boundary.

use chrono::{DateTime, Utc};

/// Convert a k8s-openapi timestamp.
pub fn to_chrono(t: &jiff::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32)
        .unwrap_or(DateTime::UNIX_EPOCH)
}

/// Convert to a k8s-openapi timestamp.
pub fn to_jiff(t: DateTime<Utc>) -> jiff::Timestamp {
    jiff::Timestamp::from_microsecond(t.timestamp_micros()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}
