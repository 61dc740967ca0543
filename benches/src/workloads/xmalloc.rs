//! xmalloc-test's pattern, many producers and many consumers: every thread allocates
//! batches of small objects and pushes them onto one shared stack, then pops a batch,
//! most often another thread's, and frees it. Frees are remote, from every thread to
//! every other, through one contended lock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::phase::Phases;
use crate::rng::Rng;
use crate::{Executor, Scale};

const BATCH: usize = 64;

/// Size of the exchange.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Batches each thread allocates.
    batches: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            batches: scale.pick(200, 10_000, 50_000, 200_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} batches of {BATCH} objects of 8-256 B per thread, through one shared stack",
            self.batches
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let stack: Mutex<Vec<Vec<Vec<u8>>>> = Mutex::new(Vec::new());
    let sum = AtomicU64::new(0);
    let free = |batch: Vec<Vec<u8>>| {
        let s = batch
            .iter()
            .map(|o| o.len() as u64 * u64::from(o[0]))
            .fold(0u64, u64::wrapping_add);
        sum.fetch_add(s, Ordering::Relaxed);
    };
    exec.run(|| {
        rayon::broadcast(|ctx| {
            let mut rng = Rng::new(ctx.index() as u64);
            for b in 0..p.batches {
                let batch: Vec<Vec<u8>> = (0..BATCH)
                    .map(|i| vec![((b + i) % 255 + 1) as u8; rng.range(8, 257)])
                    .collect();
                let popped = {
                    let mut stack = stack.lock().unwrap();
                    // The batch a thread pushed last, often another thread's.
                    let popped = stack.pop();
                    stack.push(batch);
                    popped
                };
                if let Some(batch) = popped {
                    free(batch);
                }
            }
        })
    });
    for batch in stack.into_inner().unwrap() {
        free(batch);
    }
    phases.end("done");
    sum.into_inner()
}
