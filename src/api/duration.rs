//! Durations as users write them in the CRDs: humantime forms (`30s`, `5m`,
//! `1h 30m`, `2d`). CEL's `duration()` takes Go syntax only (`1h30m`); the
//! docs say which field takes which.

use std::time::Duration;

/// Parse a humantime duration; the error names what was wrong.
pub fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration ({e}); use forms like 30s, 5m, 1h 30m"))
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
    }
}
