//! rptest's pattern, batches of mixed sizes with cross-thread frees: every thread
//! allocates batches of blocks whose sizes are spread evenly over the orders of
//! magnitude from 16 B to 32 KiB, frees most batches itself in a shuffled order, and
//! hands every fourth to the next thread, which frees it.

use std::fmt;
use std::sync::Mutex;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

const BATCH: usize = 256;

/// Size of the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Batches per thread.
    batches: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            batches: scale.pick(40, 600, 1_200, 5_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} batches of {BATCH} blocks of 16 B-32 KiB (log-uniform) per thread, one in four \
             freed by the next thread",
            self.batches
        )
    }
}

type Inbox = Mutex<Vec<Vec<Vec<u8>>>>;

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let threads = exec.threads();
    let inboxes: Vec<Inbox> = (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let phases = Phases::start();
    let sums = exec.run(|| {
        rayon::broadcast(|ctx| {
            let me = ctx.index();
            let next = &inboxes[(me + 1) % threads];
            batches(me as u64, p.batches, &inboxes[me], next)
        })
    });
    let late: u64 = inboxes.iter().map(free_all).fold(0, u64::wrapping_add);
    phases.end("done");
    // Which thread frees a handed batch depends on timing; the total does not.
    mix(0, sums.into_iter().fold(late, u64::wrapping_add))
}

/// A size spread evenly over the orders of magnitude from 16 B to 32 KiB.
fn size(rng: &mut Rng) -> usize {
    let shift = rng.range(4, 15);
    rng.range(1 << shift, 2 << shift)
}

fn batches(seed: u64, count: usize, inbox: &Inbox, next: &Inbox) -> u64 {
    let mut rng = Rng::new(seed);
    let mut sum = 0u64;
    for b in 0..count {
        let mut batch: Vec<Vec<u8>> = (0..BATCH)
            .map(|i| vec![((b + i) % 251 + 1) as u8; size(&mut rng)])
            .collect();
        if b % 4 == 3 {
            next.lock().unwrap().push(batch);
        } else {
            while !batch.is_empty() {
                let i = rng.range(0, batch.len());
                sum = sum.wrapping_add(batch.swap_remove(i).len() as u64);
            }
        }
        sum = sum.wrapping_add(free_all(inbox));
    }
    sum
}

/// Frees every batch in `inbox`; returns their total size.
fn free_all(inbox: &Inbox) -> u64 {
    let handed = std::mem::take(&mut *inbox.lock().unwrap());
    handed
        .iter()
        .flatten()
        .map(|block| block.len() as u64)
        .fold(0, u64::wrapping_add)
}
