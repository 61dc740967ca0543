//! alloc-test's pattern, Pareto-distributed sizes: every thread keeps a working set of
//! slots and replaces the object in a random slot, over and over, with one whose size
//! follows a Pareto distribution (most of 8-64 B, a long tail up to 64 KiB), as the
//! sizes of real programs' allocations do. Each thread's set is freed when it ends.

use std::fmt;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

/// The smallest size, and the largest (the tail is cut there).
const MIN_SIZE: f64 = 8.0;
const MAX_SIZE: usize = 64 << 10;
/// The Pareto shape: the share of sizes above `x` falls as `(MIN_SIZE / x)^ALPHA`.
const ALPHA: f64 = 1.1;

/// Size of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Slots per thread.
    slots: usize,
    /// Replacements per thread.
    ops: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            slots: scale.pick(1_000, 20_000, 50_000, 100_000),
            ops: scale.pick(10_000, 500_000, 1_500_000, 6_000_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} slots per thread, {} replacements with Pareto sizes of 8 B-64 KiB",
            self.slots, self.ops
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let sums = exec.run(|| rayon::broadcast(|ctx| replace(ctx.index() as u64, p)));
    phases.end("done");
    sums.into_iter().fold(0, mix)
}

/// A size drawn from the Pareto distribution, by inverting its distribution function.
fn pareto(rng: &mut Rng) -> usize {
    // Uniform in (0, 1]: 53 random bits, never 0.
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let size = MIN_SIZE / u.powf(1.0 / ALPHA);
    (size as usize).min(MAX_SIZE)
}

fn replace(seed: u64, p: &Params) -> u64 {
    let mut rng = Rng::new(seed);
    let mut slots: Vec<Vec<u8>> = vec![Vec::new(); p.slots];
    let mut sum = 0u64;
    for i in 0..p.ops {
        let slot = rng.range(0, slots.len());
        let len = pareto(&mut rng);
        let old = std::mem::replace(&mut slots[slot], vec![(i % 251 + 1) as u8; len]);
        sum = sum.wrapping_add(old.len() as u64);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_mostly_small_with_a_tail() {
        let mut rng = Rng::new(3);
        let sizes: Vec<usize> = (0..100_000).map(|_| pareto(&mut rng)).collect();
        assert!(sizes.iter().all(|&s| (8..=MAX_SIZE).contains(&s)));
        let small = sizes.iter().filter(|&&s| s <= 64).count();
        let large = sizes.iter().filter(|&&s| s >= 4096).count();
        // P(size <= 64) = 1 - (8/64)^1.1 = 0.90; P(size >= 4096) = (8/4096)^1.1 = 0.001.
        assert!((85_000..95_000).contains(&small), "{small}");
        assert!((20..300).contains(&large), "{large}");
    }
}
