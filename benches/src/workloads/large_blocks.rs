//! Large blocks: every thread allocates blocks of 5-25 MiB, fills them, and holds the
//! last two. Sizes around glibc's dynamic mmap threshold (at most 32 MiB) and above
//! jemalloc's and mimalloc's large-size classes.

use std::collections::VecDeque;
use std::fmt;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

const HELD: usize = 2;

/// Size of the large-block phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Blocks each thread allocates.
    blocks: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            blocks: scale.pick(4, 15, 60, 120),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} blocks of 5-25 MiB per thread, {HELD} held",
            self.blocks
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let sums = exec.run(|| rayon::broadcast(|ctx| blocks(ctx.index() as u64, p.blocks)));
    phases.end("done");
    sums.into_iter().fold(0, mix)
}

fn blocks(seed: u64, count: usize) -> u64 {
    let mut rng = Rng::new(seed);
    let mut held = VecDeque::with_capacity(HELD + 1);
    let mut sum = 0;
    for b in 0..count {
        let len = rng.range(5 << 20, 25 << 20);
        let block = vec![(b % 251 + 1) as u8; len];
        sum = mix(sum, block[len / 2] as u64 ^ len as u64);
        held.push_back(block);
        if held.len() > HELD {
            held.pop_front();
        }
    }
    sum
}
