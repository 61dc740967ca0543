//! Statistics over repetitions: the median with its spread, and geometric means.

/// A median over repetitions with the smallest and largest value, so a difference can
/// be told from noise: two contenders whose ranges overlap are not told apart.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Spread {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        v.sort_by(f64::total_cmp);
        Some(Spread {
            median: median(v.iter().copied())?,
            min: *v.first()?,
            max: *v.last()?,
        })
    }

    /// Every figure divided by `by` (a ratio to a reference's median).
    pub fn over(self, by: f64) -> Spread {
        Spread {
            median: self.median / by,
            min: self.min / by,
            max: self.max / by,
        }
    }

    /// Whether the range is a single value (one repetition, or all equal).
    pub fn is_point(&self) -> bool {
        self.min == self.max
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` when
/// empty.
pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// The index of the value closest to the median (the run whose timeline represents the
/// others).
pub(crate) fn median_index(values: &[f64]) -> Option<usize> {
    let m = median(values.iter().copied())?;
    (0..values.len()).min_by(|&a, &b| (values[a] - m).abs().total_cmp(&(values[b] - m).abs()))
}

/// The geometric mean of positive `values`; `None` when there are none or one is not
/// positive.
pub(crate) fn geomean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut log_sum, mut n) = (0.0, 0u32);
    for v in values {
        if !(v > 0.0 && v.is_finite()) {
            return None;
        }
        log_sum += v.ln();
        n += 1;
    }
    (n > 0).then(|| (log_sum / f64::from(n)).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median([]), None);
        assert_eq!(median([3.0]), Some(3.0));
        assert_eq!(median([5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median_index(&[9.0, 1.0, 4.0]), Some(2));
        assert_eq!(median_index(&[]), None);
    }

    #[test]
    fn spreads() {
        assert_eq!(Spread::of([]), None);
        let s = Spread::of([4.0, 1.0, 9.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 9.0));
        assert!(!s.is_point());
        let r = s.over(2.0);
        assert_eq!((r.median, r.min, r.max), (1.5, 0.5, 4.5));
        assert!(Spread::of([7.0]).unwrap().is_point());
    }

    #[test]
    fn geometric_means() {
        assert_eq!(geomean([]), None);
        assert!((geomean([2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert!((geomean([0.5, 2.0, 1.0]).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(geomean([1.0, 0.0]), None);
        assert_eq!(geomean([1.0, f64::NAN]), None);
    }
}
