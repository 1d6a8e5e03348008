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

/// The controller's critical path as its `rebound_critical_path_seconds`
/// histogram shows it: for each action, the mean of each stage (ms) in
/// the order of [`rebound::metrics::PATH_STAGES`], and how many actions.
pub fn path_means(text: &str) -> BTreeMap<String, (u64, Vec<f64>)> {
    let mut sums: BTreeMap<(String, String), (f64, u64)> = BTreeMap::new();
    for l in text.lines() {
        let (is_sum, rest) = if let Some(r) = l.strip_prefix("rebound_critical_path_seconds_sum{") {
            (true, r)
        } else if let Some(r) = l.strip_prefix("rebound_critical_path_seconds_count{") {
            (false, r)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        let (Some(stage), Some(action), Ok(v)) =
            (label("stage"), label("action"), value.trim().parse::<f64>())
        else {
            continue;
        };
        let e = sums.entry((action, stage)).or_default();
        if is_sum {
            e.0 = v;
        } else {
            e.1 = v as u64;
        }
    }
    let mut out: BTreeMap<String, (u64, Vec<f64>)> = BTreeMap::new();
    for ((action, stage), (sum, count)) in sums {
        let Some(i) = rebound::metrics::PATH_STAGES
            .iter()
            .position(|s| *s == stage)
        else {
            continue;
        };
        let e = out
            .entry(action)
            .or_insert_with(|| (0, vec![0.0; rebound::metrics::PATH_STAGES.len()]));
        e.0 = e.0.max(count);
        if count > 0 {
            e.1[i] = 1000.0 * sum / count as f64;
        }
    }
    // The controller creates every (stage, action) series at zero: an
    // action it never took has no path to report.
    out.retain(|_, (n, _)| *n > 0);
    out
}

/// How many observations of histogram `name` were above `le` (one of its
/// bucket bounds): all of them less the bucket's count.
pub fn histogram_count_above(text: &str, name: &str, le: &str) -> Option<u64> {
    let count = |bound: &str| {
        let line = format!("{name}_bucket{{le=\"{bound}\"}}");
        text.lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(count("+Inf")?.saturating_sub(count(le)?))
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
    fn path_means_read_the_controllers_own_exposition() {
        let m = rebound::metrics::Metrics::new();
        let ms = std::time::Duration::from_millis;
        for (stage, d) in rebound::metrics::PATH_STAGES.iter().zip([1, 2, 3, 4, 5]) {
            m.path_stage(stage, "restart_job", ms(d));
            m.path_stage(stage, "restart_job", ms(3 * d));
        }
        m.path_stage("answered", "cordon", ms(8));
        let got = path_means(&m.encode());
        let (n, means) = &got["restart_job"];
        assert_eq!(*n, 2);
        let want = [2.0, 4.0, 6.0, 8.0, 10.0];
        for (g, w) in means.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "{means:?}");
        }
        assert_eq!(got["cordon"].0, 1);
        assert!((got["cordon"].1[4] - 8.0).abs() < 1e-9);
        assert_eq!(got["cordon"].1[0], 0.0);
        assert!(
            !got.contains_key("record"),
            "no path for an action never taken"
        );
    }

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
