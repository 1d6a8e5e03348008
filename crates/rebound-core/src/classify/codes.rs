//! Code sets: exact codes, numeric ranges, hex codes.

use crate::fault::FaultSource;
use std::collections::HashSet;

/// A compiled list of codes such as `["79", "140-143", "0x80E18400-0x80E184FF", "OOMKilled"]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CodeSet {
    exact: HashSet<String>,
    ranges: Vec<(u64, u64)>,
}

/// Why a code entry was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("code {code:?}: {why}")]
pub struct CodeError {
    pub code: String,
    pub why: String,
}

impl CodeSet {
    /// Compile the codes of one rule for `source` (Ascend codes are hex).
    pub fn compile(codes: &[String], source: FaultSource) -> Result<CodeSet, CodeError> {
        let mut set = CodeSet::default();
        for raw in codes {
            let c = raw.trim();
            if c.is_empty() {
                return Err(CodeError {
                    code: raw.clone(),
                    why: "empty code".into(),
                });
            }
            if let Some((lo, hi)) = split_range(c, source) {
                let parse = |s: &str| {
                    parse_number(s, source).ok_or_else(|| CodeError {
                        code: raw.clone(),
                        why: format!("range bound {s:?} is not a number"),
                    })
                };
                let (lo, hi) = (parse(lo)?, parse(hi)?);
                if lo > hi {
                    return Err(CodeError {
                        code: raw.clone(),
                        why: "range start is above its end".into(),
                    });
                }
                set.ranges.push((lo, hi));
            } else {
                set.exact.insert(normalize(c, source));
            }
        }
        Ok(set)
    }

    /// Whether a fault's code (or its reason) is in the set.
    pub fn matches(&self, source: FaultSource, code: &str, reason: Option<&str>) -> bool {
        self.matches_key(&CodeKey::new(source, code, reason))
    }

    /// Whether a fault, normalised once into a [`CodeKey`], is in the set:
    /// the hot path, with no allocation per rule.
    pub fn matches_key(&self, k: &CodeKey) -> bool {
        if self.exact.contains(&k.code) {
            return true;
        }
        if let Some(r) = &k.reason
            && self.exact.contains(r)
        {
            return true;
        }
        if !self.ranges.is_empty()
            && let Some(n) = k.number
        {
            return self.ranges.iter().any(|&(lo, hi)| lo <= n && n <= hi);
        }
        false
    }

    /// Whether the set is empty (a rule with only `when`).
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.ranges.is_empty()
    }
}

/// A fault's code and reason normalised once, matched against every rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeKey {
    code: String,
    reason: Option<String>,
    number: Option<u64>,
}

impl CodeKey {
    /// Normalise a fault's code and reason for `source`.
    pub fn new(source: FaultSource, code: &str, reason: Option<&str>) -> CodeKey {
        CodeKey {
            code: normalize(code, source),
            reason: reason.map(|r| normalize(r, source)),
            number: parse_number(code, source),
        }
    }
}

fn split_range(c: &str, source: FaultSource) -> Option<(&str, &str)> {
    // A range only when both sides are numbers: `-1` (a negative exit code)
    // and `kcover.io/need-recovery` (a name) are exact codes.
    let (lo, hi) = c.split_once('-')?;
    let (lo, hi) = (lo.trim(), hi.trim());
    (parse_number(lo, source).is_some() && parse_number(hi, source).is_some()).then_some((lo, hi))
}

/// Canonical form for exact comparison: hex sources and `0x` codes are
/// upper-cased without prefix or leading zeros; names are kept as written
/// but compared case-insensitively.
pub fn normalize(code: &str, source: FaultSource) -> String {
    let c = code.trim();
    if let Some(h) = c.strip_prefix("0x").or_else(|| c.strip_prefix("0X")) {
        return strip_zeros(&h.to_ascii_uppercase());
    }
    if source.hex_codes() && c.chars().all(|ch| ch.is_ascii_hexdigit()) {
        return strip_zeros(&c.to_ascii_uppercase());
    }
    if c.chars().all(|ch| ch.is_ascii_digit()) {
        return strip_zeros(c);
    }
    c.to_ascii_lowercase()
}

fn strip_zeros(s: &str) -> String {
    let t = s.trim_start_matches('0');
    if t.is_empty() { "0".into() } else { t.into() }
}

fn parse_number(s: &str, source: FaultSource) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if source.hex_codes() {
        u64::from_str_radix(s, 16).ok()
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(codes: &[&str], src: FaultSource) -> CodeSet {
        CodeSet::compile(
            &codes.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            src,
        )
        .unwrap()
    }

    #[test]
    fn decimal_ranges_and_exact() {
        let s = set(&["79", "140-143"], FaultSource::NvidiaXid);
        assert!(s.matches(FaultSource::NvidiaXid, "79", None));
        assert!(s.matches(FaultSource::NvidiaXid, "141", None));
        assert!(!s.matches(FaultSource::NvidiaXid, "144", None));
        assert!(!s.matches(FaultSource::NvidiaXid, "7", None));
    }

    #[test]
    fn hex_codes_for_ascend() {
        let s = set(
            &["80E18402", "0x80C98000-0x80C98FFF"],
            FaultSource::AscendNpu,
        );
        assert!(s.matches(FaultSource::AscendNpu, "80e18402", None));
        assert!(s.matches(FaultSource::AscendNpu, "0x80E18402", None));
        assert!(s.matches(FaultSource::AscendNpu, "80C98123", None));
        assert!(!s.matches(FaultSource::AscendNpu, "80C99000", None));
    }

    #[test]
    fn reasons_match_case_insensitively_and_negative_codes_are_exact() {
        let s = set(
            &["OOMKilled", "-1", "kcover.io/need-recovery"],
            FaultSource::PodExit,
        );
        assert!(s.matches(FaultSource::PodExit, "kcover.io/need-recovery", None));
        assert!(s.matches(FaultSource::PodExit, "137", Some("OOMKilled")));
        assert!(s.matches(FaultSource::PodExit, "-1", None));
        assert!(!s.matches(FaultSource::PodExit, "1", Some("Error")));
    }

    #[test]
    fn bad_ranges_are_errors() {
        let bad = |c: &str| CodeSet::compile(&[c.to_string()], FaultSource::NvidiaXid).unwrap_err();
        assert!(bad("143-140").why.contains("above"));
        // Not numbers on both sides: an exact code, not a bad range.
        assert!(CodeSet::compile(&["a-b".to_string()], FaultSource::NvidiaXid).is_ok());
        assert!(bad(" ").why.contains("empty"));
    }
}
