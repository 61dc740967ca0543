//! Medians over repetitions.

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
}
