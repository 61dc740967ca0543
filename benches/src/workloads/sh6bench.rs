//! sh6bench's pattern, ordered frees of small objects: every thread allocates batches
//! of objects of 1-1000 B and frees each batch in LIFO order (the last allocated first)
//! or in allocation order, alternately, so the allocator's free lists are exercised in
//! both directions.

use std::fmt;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

const BATCH: usize = 1_000;

/// Size of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Batches per thread.
    batches: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            batches: scale.pick(20, 500, 1_500, 6_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} batches of {BATCH} objects of 1-1000 B per thread, freed LIFO and in order",
            self.batches
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let sums = exec.run(|| rayon::broadcast(|ctx| batches(ctx.index() as u64, p.batches)));
    phases.end("done");
    sums.into_iter().fold(0, mix)
}

fn batches(seed: u64, count: usize) -> u64 {
    let mut rng = Rng::new(seed);
    let mut sum = 0u64;
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    for b in 0..count {
        for i in 0..BATCH {
            batch.push(vec![((b + i) % 251 + 1) as u8; rng.range(1, 1001)]);
        }
        if b % 2 == 0 {
            while let Some(object) = batch.pop() {
                sum = sum.wrapping_add(object.len() as u64);
            }
        } else {
            for object in batch.drain(..) {
                sum = sum.wrapping_add(object.len() as u64 * 3);
            }
        }
    }
    sum
}
