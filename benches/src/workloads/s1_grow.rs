//! S1 grow: S1 with every result grown by `push` from an empty `Vec`, as code that
//! does not know a result's length ahead writes it. The same tasks, values, labels and
//! phases as `s1-phase`; but each result passes through every capacity of `Vec`'s
//! doubling (4 values, 8, … 65,536: 512 KiB for 50,000 values), each step a
//! `realloc` that grows the block in place or moves it and frees the old one. So the
//! allocator's free blocks of every size up to 256 KiB are in play while the results
//! are built, and each result holds more than it uses.

use std::fmt;

use crate::workloads::s1_phase;
use crate::{Executor, Scale};

/// Size of the phase: the same as `s1-phase`'s at every scale.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    phase: s1_phase::Params,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            phase: s1_phase::Params::new(scale),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, each grown by push", self.phase)
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    s1_phase::run_with(exec, &p.phase, task)
}

/// One task: `s1-phase`'s scratch churn, then its result pushed value by value into a
/// `Vec` that starts empty, and its label.
fn task(i: usize, len: usize) -> (String, Vec<f64>) {
    let acc = s1_phase::churn(i);
    let mut values = Vec::new();
    for j in 0..len {
        values.push(s1_phase::value(i, j));
    }
    (s1_phase::label(i, acc), values)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grown result holds what `s1-phase`'s does, so the two workloads' checksums
    /// agree; only its capacity shows it grew.
    #[test]
    fn grows_the_same_result_as_s1_phase() {
        let len = s1_phase::Params::new(Scale::Tiny).len;
        for i in [0, 1, 39] {
            let (label, values) = task(i, len);
            let (expected_label, expected) = s1_phase::task(i, len);
            assert_eq!(label, expected_label);
            assert!(values
                .iter()
                .map(|v| v.to_bits())
                .eq(expected.iter().map(|v| v.to_bits())));
            assert_eq!(expected.capacity(), len);
            assert!(values.capacity().is_power_of_two() && values.capacity() > len);
        }
    }
}
