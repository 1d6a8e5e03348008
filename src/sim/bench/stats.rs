//! The numbers `rebound sim` reports: percentiles of measured samples, and
//! what it reads off the controller's Prometheus exposition (histogram
//! quantiles, counters by label).

use serde::Serialize;
use std::collections::BTreeMap;

/// Percentiles of a set of measurements, in milliseconds.
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct Percentiles {
    /// How many were measured.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The nearest-rank percentiles of `v` (empty: all zero, count 0).
pub fn percentiles(mut v: Vec<f64>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    Percentiles {
        count: v.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

/// Quantiles read off a Prometheus histogram: the upper bound of the
/// bucket holding each quantile (so "p99 ≤ 5 ms").
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct BucketQuantiles {
    /// Observations.
    pub count: u64,
    /// Bucket bound (ms) at or under which half the observations fall.
    pub p50_le: f64,
    /// The same for 90 %.
    pub p90_le: f64,
    /// The same for 99 %.
    pub p99_le: f64,
}

/// Read `name`'s buckets from a Prometheus text exposition and return the
/// bucket bounds (ms) under which 50/90/99 % of the observations fall.
pub fn histogram_quantiles(text: &str, name: &str) -> Option<BucketQuantiles> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let at = |q: f64| {
        let want = (total as f64 * q).ceil() as u64;
        buckets
            .iter()
            .find(|(_, c)| *c >= want)
            .map_or(f64::INFINITY, |(le, _)| le * 1000.0)
    };
    Some(BucketQuantiles {
        count: total,
        p50_le: at(0.50),
        p90_le: at(0.90),
        p99_le: at(0.99),
    })
}

/// The values of counter `name` by the value of its one label `label`
/// (`rebound_api_requests_total{verb="patch"} 3` → `{"patch": 3}`).
pub fn counter_by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{name}{{{label}=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (value, count) = rest.split_once("\"}")?;
            Some((value.to_owned(), count.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_read_the_bucket_that_holds_each_quantile() {
        let text = "# HELP x\n\
            rebound_reaction_seconds_sum 0.5\n\
            rebound_reaction_seconds_count 100\n\
            rebound_reaction_seconds_bucket{le=\"0.0005\"} 40\n\
            rebound_reaction_seconds_bucket{le=\"0.001\"} 89\n\
            rebound_reaction_seconds_bucket{le=\"0.005\"} 98\n\
            rebound_reaction_seconds_bucket{le=\"0.05\"} 100\n\
            rebound_reaction_seconds_bucket{le=\"+Inf\"} 100\n";
        let q = histogram_quantiles(text, "rebound_reaction_seconds").expect("buckets");
        assert_eq!(q.count, 100);
        assert_eq!(q.p50_le, 1.0);
        assert_eq!(q.p90_le, 5.0);
        assert_eq!(q.p99_le, 50.0);
        assert!(histogram_quantiles(text, "other").is_none());
    }

    #[test]
    fn percentiles_take_the_nearest_rank_and_keep_signs() {
        let p = percentiles((1..=100).map(f64::from).collect());
        assert_eq!(
            (p.count, p.p50, p.p90, p.p99, p.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        let p = percentiles(vec![-1.5, 2.0]);
        assert_eq!((p.p50, p.max), (-1.5, 2.0));
        assert_eq!(percentiles(Vec::new()), Percentiles::default());
    }

    #[test]
    fn counters_are_read_by_label() {
        let text = "# TYPE rebound_api_requests counter\n\
            rebound_api_requests_total{verb=\"delete\"} 12\n\
            rebound_api_requests_total{verb=\"patch\"} 3\n\
            rebound_api_errors_total{verb=\"patch\"} 1\n";
        let m = counter_by_label(text, "rebound_api_requests_total", "verb");
        assert_eq!(m.len(), 2);
        assert_eq!(m["delete"], 12);
        assert_eq!(m["patch"], 3);
    }
}
