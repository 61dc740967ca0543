//! sh8bench's pattern, ordered and cross-thread frees: like `sh6bench`, with sizes up
//! to 4 KiB, and the last quarter of every batch handed to the next thread, which frees
//! it in reverse order: a quarter of all frees are remote.

use std::fmt;
use std::sync::Mutex;

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
            batches: scale.pick(20, 250, 450, 2_400),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} batches of {BATCH} objects of 1-4096 B per thread, a quarter freed by the next \
             thread",
            self.batches
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let threads = exec.threads();
    let inboxes: Vec<Mutex<Vec<Vec<Vec<u8>>>>> =
        (0..threads).map(|_| Mutex::new(Vec::new())).collect();
    let phases = Phases::start();
    let sums = exec.run(|| {
        rayon::broadcast(|ctx| {
            let me = ctx.index();
            let next = &inboxes[(me + 1) % threads];
            let mut sum = batches(me as u64, p.batches, &inboxes[me], next);
            // What the previous thread handed over after this one's last look.
            sum = sum.wrapping_add(free_handed(&inboxes[me]));
            sum
        })
    });
    // Batches handed over after their receiver had finished.
    let late: u64 = inboxes.iter().map(free_handed).fold(0, u64::wrapping_add);
    phases.end("done");
    // Each thread's share of remote frees depends on timing, their total does not.
    let total = sums.into_iter().fold(late, u64::wrapping_add);
    mix(0, total)
}

fn batches(
    seed: u64,
    count: usize,
    inbox: &Mutex<Vec<Vec<Vec<u8>>>>,
    next: &Mutex<Vec<Vec<Vec<u8>>>>,
) -> u64 {
    let mut rng = Rng::new(seed);
    let mut sum = 0u64;
    let mut batch: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    for b in 0..count {
        for i in 0..BATCH {
            batch.push(vec![((b + i) % 251 + 1) as u8; rng.range(1, 4097)]);
        }
        let handed = batch.split_off(BATCH - BATCH / 4);
        next.lock().unwrap().push(handed);
        if b % 2 == 0 {
            while let Some(object) = batch.pop() {
                sum = sum.wrapping_add(object.len() as u64);
            }
        } else {
            for object in batch.drain(..) {
                sum = sum.wrapping_add(object.len() as u64);
            }
        }
        sum = sum.wrapping_add(free_handed(inbox));
    }
    sum
}

/// Frees, in reverse order, every batch in `inbox`; returns their total size.
fn free_handed(inbox: &Mutex<Vec<Vec<Vec<u8>>>>) -> u64 {
    let handed = std::mem::take(&mut *inbox.lock().unwrap());
    let mut sum = 0u64;
    for mut batch in handed {
        while let Some(object) = batch.pop() {
            sum = sum.wrapping_add(object.len() as u64);
        }
    }
    sum
}
