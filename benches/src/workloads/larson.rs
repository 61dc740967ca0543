//! Larson-style server churn: each thread owns a set of slots and, over and over,
//! replaces the object in a random slot with a new one of random size. After each round
//! the sets move to the next thread, so objects are freed by a thread other than the
//! one that allocated them, as when a server hands connections between workers.

use std::fmt;
use std::sync::Mutex;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

/// Size of the server run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    slots: usize,
    rounds: usize,
    /// Replacements per thread per round.
    ops: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            slots: scale.pick(1_000, 10_000, 20_000, 40_000),
            rounds: scale.pick(4, 10, 10, 20),
            ops: scale.pick(10_000, 100_000, 350_000, 1_000_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} slots per thread, {} rounds x {} replacements of 16-1024 B",
            self.slots, self.rounds, self.ops
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let threads = exec.threads();
    let sets: Vec<Mutex<Vec<Vec<u8>>>> = (0..threads)
        .map(|_| Mutex::new(vec![Vec::new(); p.slots]))
        .collect();
    let sums: Vec<u64> = exec.run(|| {
        (0..p.rounds)
            .map(|round| {
                rayon::broadcast(|ctx| {
                    let set = (ctx.index() + round) % threads;
                    let mut slots = sets[set].lock().unwrap();
                    serve(&mut slots, (round * threads + set) as u64, p.ops)
                })
                .into_iter()
                .fold(0, mix)
            })
            .collect()
    });
    phases.end("served");
    drop(sets);
    phases.end("dropped");
    sums.into_iter().fold(0, mix)
}

fn serve(slots: &mut [Vec<u8>], seed: u64, ops: usize) -> u64 {
    let mut rng = Rng::new(seed);
    let mut sum = 0u64;
    for i in 0..ops {
        let slot = rng.range(0, slots.len());
        let len = rng.range(16, 1024);
        let old = std::mem::replace(&mut slots[slot], vec![(i % 251 + 1) as u8; len]);
        sum = sum.wrapping_add(old.len() as u64);
    }
    sum
}
