//! Summary statistics for `rkube compare`.

use serde::Serialize;

/// Minimum, maximum, mean and population standard deviation of a set of
/// values (all zero for an empty set).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Stats {
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation (divides by n: the nodes are the whole
    /// population, not a sample).
    pub stddev: f64,
}

impl Stats {
    /// Statistics of `values`.
    pub fn of(values: &[f64]) -> Stats {
        if values.is_empty() {
            return Stats::default();
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        Stats {
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mean,
            stddev: var.sqrt(),
        }
    }
}

/// `numerator / denominator`, or 0 when the denominator is not positive.
pub fn ratio(numerator: i64, denominator: i64) -> f64 {
    if denominator <= 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn population_stddev() {
        // The textbook example: mean 5, population standard deviation 2.
        let s = Stats::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!(close(s.mean, 5.0));
        assert!(close(s.stddev, 2.0));
        assert!(close(s.min, 2.0));
        assert!(close(s.max, 9.0));
    }

    #[test]
    fn piled_versus_spread() {
        // 4 pods on one of 3 nodes versus 2/1/1.
        let piled = Stats::of(&[0.0, 4.0, 0.0]);
        let spread = Stats::of(&[2.0, 1.0, 1.0]);
        assert!(close(piled.stddev, (32.0f64 / 9.0).sqrt()));
        assert!(close(spread.stddev, (2.0f64 / 9.0).sqrt()));
        assert!(spread.stddev < piled.stddev);
        assert!(close(piled.mean, spread.mean));
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(Stats::of(&[]), Stats::default());
        let one = Stats::of(&[3.5]);
        assert_eq!(
            (one.min, one.max, one.mean, one.stddev),
            (3.5, 3.5, 3.5, 0.0)
        );
        let same = Stats::of(&[0.25; 5]);
        assert!(close(same.stddev, 0.0));
        assert_eq!(ratio(1, 0), 0.0);
        assert_eq!(ratio(-1, -4), 0.0);
        assert!(close(ratio(500, 16000), 0.03125));
    }
}
