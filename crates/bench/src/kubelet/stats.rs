//! The harness's arithmetic: percentiles of one run, medians over runs,
//! and the order in which the kubelets take turns.

/// The p-th percentile (0 < p ≤ 100) of `values` by nearest rank: the
/// smallest value with at least p % of the values at or below it. `None`
/// for no values.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The kubelets measured side by side.
pub const KUBELETS: [&str; 2] = ["rkube", "upstream"];

/// The turns of `runs` rounds: each round runs both kubelets, and the one
/// that goes first alternates (rkube first in odd rounds), so a drift of
/// the machine over the benchmark hits both alike.
pub fn order(runs: usize) -> Vec<(usize, &'static str)> {
    let mut out = Vec::with_capacity(runs * 2);
    for r in 1..=runs {
        let (a, b) = if r % 2 == 1 {
            (KUBELETS[0], KUBELETS[1])
        } else {
            (KUBELETS[1], KUBELETS[0])
        };
        out.push((r, a));
        out.push((r, b));
    }
    out
}

/// `a / b`, when both are known and `b` is not zero.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 90.0), Some(90.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        // Ten values: p99 is the largest, p50 the fifth; order does not matter.
        let ten = [7.0, 1.0, 9.0, 3.0, 5.0, 2.0, 10.0, 4.0, 8.0, 6.0];
        assert_eq!(percentile(&ten, 99.0), Some(10.0));
        assert_eq!(percentile(&ten, 90.0), Some(9.0));
        assert_eq!(percentile(&ten, 50.0), Some(5.0));
        assert_eq!(percentile(&[3.5], 99.0), Some(3.5));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&ten, 0.0), None);
        assert_eq!(percentile(&[f64::NAN, 2.0], 50.0), Some(2.0));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn turns_alternate() {
        assert_eq!(
            order(3),
            vec![
                (1, "rkube"),
                (1, "upstream"),
                (2, "upstream"),
                (2, "rkube"),
                (3, "rkube"),
                (3, "upstream"),
            ]
        );
        assert!(order(0).is_empty());
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
    }
}
