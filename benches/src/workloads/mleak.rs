//! mleak's pattern, retention from dead threads: round after round, fresh threads
//! allocate small objects, free half of them in random order, hand the other half to
//! the main thread and exit; the main thread frees what it was handed. Nothing is kept,
//! so whatever the allocator holds for threads that are gone shows as RSS growth,
//! marked at each fifth of the run.

use std::fmt;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

const MARKS: [&str; 5] = ["loop1", "loop2", "loop3", "loop4", "loop5"];

/// Size of the thread churn.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    rounds: usize,
    /// Objects each thread allocates.
    objects: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            rounds: scale.pick(10, 40, 60, 200),
            objects: scale.pick(1_000, 5_000, 5_000, 10_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rounds of new threads x {} objects of 16-2048 B, half freed by the main thread",
            self.rounds, self.objects
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let threads = exec.threads();
    let per_mark = p.rounds.div_ceil(MARKS.len());
    let mut sum = 0;
    for round in 0..p.rounds {
        let handed = exec.spawn_threads(threads, |i| {
            allocate((round * threads + i) as u64, p.objects)
        });
        for objects in handed {
            let bytes: usize = objects.iter().map(Vec::len).sum();
            sum = mix(sum, bytes as u64);
        }
        if (round + 1) % per_mark == 0 || round + 1 == p.rounds {
            phases.end(MARKS[round / per_mark]);
        }
    }
    sum
}

/// Allocates `objects`, frees half in random order, returns the rest.
fn allocate(seed: u64, objects: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut all: Vec<Vec<u8>> = (0..objects)
        .map(|i| vec![(i % 251 + 1) as u8; rng.range(16, 2049)])
        .collect();
    for _ in 0..objects / 2 {
        let i = rng.range(0, all.len());
        all.swap_remove(i);
    }
    all
}
