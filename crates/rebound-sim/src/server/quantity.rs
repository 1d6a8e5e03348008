//! Resource quantities in their canonical form, as a real API server
//! stores them (`1000m` → `1`, `1024Mi` → `1Gi`, `1.5` → `1500m`,
//! `1000000k` → `1G`; the suffix family — binary SI, decimal SI, decimal
//! exponent — is kept, as in `resource.Quantity`).

/// A parsed quantity: `mantissa × 10^exp10` (exact), and its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    BinarySi,
    DecimalSi,
    DecimalExponent,
}

/// Why a quantity does not parse (the real server's message).
pub const INVALID: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn split(s: &str) -> Option<(&str, &str)> {
    let end = s
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '+' || *c == '-'))))
        .map_or(s.len(), |(i, _)| i);
    let (num, suffix) = s.split_at(end);
    (!num.is_empty() && num != "+" && num != "-").then_some((num, suffix))
}

/// Parses the number part into (negative, digits as integer, scale) so
/// that value = digits × 10^-scale.
fn number(num: &str) -> Option<(bool, i128, i32)> {
    let (neg, digits) = match num.as_bytes().first() {
        Some(b'-') => (true, &num[1..]),
        Some(b'+') => (false, &num[1..]),
        _ => (false, num),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let all = format!("{int}{frac}");
    let all = all.trim_start_matches('0');
    let v: i128 = if all.is_empty() { 0 } else { all.parse().ok()? };
    Some((neg, v, frac.len() as i32))
}

/// The canonical form of a quantity, or `None` when it does not parse.
pub fn canonical(s: &str) -> Option<String> {
    let (num, suffix) = split(s.trim())?;
    let (neg, mut mant, scale) = number(num)?;
    // value = mant × 10^exp10 × 2^exp2
    let (mut exp10, exp2, format) = match suffix {
        "" => (0, 0, Format::DecimalSi),
        "n" => (-9, 0, Format::DecimalSi),
        "u" => (-6, 0, Format::DecimalSi),
        "m" => (-3, 0, Format::DecimalSi),
        "k" => (3, 0, Format::DecimalSi),
        "M" => (6, 0, Format::DecimalSi),
        "G" => (9, 0, Format::DecimalSi),
        "T" => (12, 0, Format::DecimalSi),
        "P" => (15, 0, Format::DecimalSi),
        "E" => (18, 0, Format::DecimalSi),
        "Ki" => (0, 10, Format::BinarySi),
        "Mi" => (0, 20, Format::BinarySi),
        "Gi" => (0, 30, Format::BinarySi),
        "Ti" => (0, 40, Format::BinarySi),
        "Pi" => (0, 50, Format::BinarySi),
        "Ei" => (0, 60, Format::BinarySi),
        e if e.starts_with(['e', 'E']) => (e[1..].parse::<i32>().ok()?, 0, Format::DecimalExponent),
        _ => return None,
    };
    exp10 -= scale;
    if exp2 > 0 {
        mant = mant.checked_mul(1i128 << exp2)?;
    }
    // normalise: strip trailing zeros into the exponent
    if mant == 0 {
        return Some("0".into());
    }
    while mant % 10 == 0 {
        mant /= 10;
        exp10 += 1;
    }
    let sign = if neg { "-" } else { "" };
    if format == Format::BinarySi && exp10 >= 0 {
        // an integer number of units: the largest power of 1024 dividing it
        let mut v = mant.checked_mul(10i128.checked_pow(exp10 as u32)?)?;
        let mut i = 0;
        while i < 6 && v % 1024 == 0 && v >= 1024 {
            v /= 1024;
            i += 1;
        }
        let suf = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
        return Some(format!("{sign}{v}{suf}"));
    }
    // decimal: exponent a multiple of 3 (rounding up below nano)
    if exp10 < -9 {
        let drop = (-9 - exp10) as u32;
        let p = 10i128.checked_pow(drop)?;
        mant = (mant + p - 1) / p;
        exp10 = -9;
    }
    let mut e3 = exp10.div_euclid(3) * 3;
    let mut m = mant.checked_mul(10i128.checked_pow((exp10 - e3) as u32)?)?;
    while m % 1000 == 0 && e3 < 18 {
        m /= 1000;
        e3 += 3;
    }
    if format == Format::DecimalExponent {
        return Some(if e3 == 0 {
            format!("{sign}{m}")
        } else {
            format!("{sign}{m}e{e3}")
        });
    }
    let suf = match e3 {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return Some(format!("{sign}{m}e{e3}")),
    };
    Some(format!("{sign}{m}{suf}"))
}

/// The numeric value of a quantity (for comparisons), or `None`.
pub fn value(s: &str) -> Option<f64> {
    let c = canonical(s)?;
    let (num, suffix) = split(&c)?;
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_as_the_real_server() {
        for (i, o) in [
            ("1000m", "1"),
            ("1024Mi", "1Gi"),
            ("2Gi", "2Gi"),
            ("1.5", "1500m"),
            ("0.5", "500m"),
            ("1000000k", "1G"),
            ("1e3", "1e3"),
            ("8", "8"),
            ("100m", "100m"),
            ("1.5Gi", "1536Mi"),
            ("0", "0"),
            ("1536", "1536"),
            ("0.1Ki", "102400m"),
        ] {
            assert_eq!(canonical(i).as_deref(), Some(o), "{i}");
        }
        assert_eq!(canonical("one"), None);
        assert_eq!(canonical("1Q"), None);
    }
}
