//! A small deterministic random number generator, so every contender gets the same
//! sizes and choices.

/// xorshift64*: fast, seedable, good enough to pick sizes and slots.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value; 0 is remapped).
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..hi` (`hi > lo`).
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        debug_assert!(hi > lo);
        lo + (self.next_u64() % (hi - lo) as u64) as usize
    }
}

/// Mixes `x` into a running checksum (order-dependent).
pub(crate) fn mix(sum: u64, x: u64) -> u64 {
    (sum ^ x).wrapping_mul(0x0100_0000_01B3).rotate_left(17)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            let x = a.range(16, 1024);
            assert_eq!(x, b.range(16, 1024));
            assert!((16..1024).contains(&x));
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        assert_ne!(Rng::new(0).next_u64(), 0);
        assert_ne!(mix(mix(0, 1), 2), mix(mix(0, 2), 1));
    }
}
