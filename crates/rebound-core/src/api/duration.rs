//! Durations as users write them in the CRDs: humantime forms (`30s`, `5m`,
//! `1h 30m`, `2d`). CEL's `duration()` takes Go syntax only (`1h30m`); the
//! docs say which field takes which.

use std::time::Duration;

/// The longest duration any field or flag takes: a year and a day. Longer
/// windows mean nothing for restarts and cooldowns, and bounding them when
/// the object is compiled keeps every date computed from them in range (a
/// `300000y` window would overflow the calendar and stop the controller).
pub const MAX: Duration = Duration::from_secs(366 * 86_400);

/// Parse a humantime duration of at most [`MAX`]; the error names what
/// was wrong.
pub fn parse(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration ({e}); use forms like 30s, 5m, 1h 30m"))?;
    if d > MAX {
        return Err(format!("{text:?} is longer than the longest allowed, 366d"));
    }
    Ok(d)
}

/// A duration computed at run time (a CEL cooldown), clamped to [`MAX`].
pub fn clamp(d: Duration) -> Duration {
    d.min(MAX)
}

/// Render a duration the way users write it.
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn humantime_forms_parse() {
        assert_eq!(super::parse("1h 30m").unwrap().as_secs(), 5400);
        assert_eq!(super::parse("30s").unwrap().as_secs(), 30);
        assert!(super::parse("soon").unwrap_err().contains("soon"));
        assert_eq!(super::parse("366d").unwrap(), super::MAX);
        // What once overflowed the calendar in the decision.
        assert!(super::parse("300000y").unwrap_err().contains("366d"));
        assert_eq!(super::clamp(std::time::Duration::MAX), super::MAX);
    }
}
