//! mstress's pattern, threads that come and go while objects outlive them: in every
//! round fresh threads start, allocate objects of mostly small, sometimes large sizes,
//! free some, and swap some into a shared transfer table (freeing what an earlier,
//! now dead, thread left there); then they exit. The table survives to the end.

use std::fmt;
use std::sync::Mutex;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

const TRANSFER: usize = 1_000;
const MARKS: [&str; 5] = ["round1", "round2", "round3", "round4", "round5"];

/// Size of the stress run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    rounds: usize,
    /// Allocations per thread per round.
    allocs: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            rounds: scale.pick(5, 10, 30, 60),
            allocs: scale.pick(1_000, 5_000, 10_000, 20_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rounds of new threads x {} objects of 16 B-64 KiB, {TRANSFER} shared slots",
            self.rounds, self.allocs
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let transfer: Vec<Mutex<Vec<u8>>> = (0..TRANSFER).map(|_| Mutex::new(Vec::new())).collect();
    let phases = Phases::start();
    let threads = exec.threads();
    let per_mark = p.rounds.div_ceil(MARKS.len());
    let mut sum = 0;
    for round in 0..p.rounds {
        let sums = exec.spawn_threads(threads, |i| {
            stress(&transfer, (round * threads + i) as u64, p.allocs)
        });
        sum = sums.into_iter().fold(sum, mix);
        if (round + 1) % per_mark == 0 || round + 1 == p.rounds {
            phases.end(MARKS[round / per_mark]);
        }
    }
    drop(transfer);
    phases.end("dropped");
    sum
}

/// One thread's life: allocate, free some, hand some over; the rest is freed when the
/// thread ends. Returns the sum of the sizes it allocated.
fn stress(transfer: &[Mutex<Vec<u8>>], seed: u64, allocs: usize) -> u64 {
    let mut rng = Rng::new(seed);
    let mut local: Vec<Vec<u8>> = Vec::new();
    let mut sum = 0u64;
    for i in 0..allocs {
        let len = if rng.range(0, 100) == 0 {
            rng.range(4 << 10, 64 << 10)
        } else {
            rng.range(16, 1 << 10)
        };
        sum = sum.wrapping_add(len as u64);
        local.push(vec![(i % 251 + 1) as u8; len]);
        match rng.range(0, 4) {
            0 => {
                let slot = rng.range(0, local.len());
                drop(local.swap_remove(slot));
            }
            1 => {
                let object = local.pop().expect("just pushed");
                let slot = rng.range(0, transfer.len());
                // What was there was allocated by an earlier thread, most likely a dead one.
                drop(std::mem::replace(
                    &mut *transfer[slot].lock().unwrap(),
                    object,
                ));
            }
            _ => {}
        }
    }
    sum
}
