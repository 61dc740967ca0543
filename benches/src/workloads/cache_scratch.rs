//! cache-scratch's pattern, passive false sharing: the main thread allocates one small
//! object per thread and hands them out; each thread frees its object, then allocates
//! and writes small objects of the same size over and over. An allocator that gives a
//! thread back the block another thread's object sits next to (on the same cache line)
//! makes the threads' writes contend although they share nothing.

use std::fmt;

use crate::phase::Phases;
use crate::rng::mix;
use crate::{Executor, Scale};

const OBJECT: usize = 8;

/// Size of the scratch phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Objects each thread allocates, writes and frees.
    rounds: usize,
    /// Writes to each object.
    writes: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            rounds: scale.pick(100, 1_000, 2_000, 4_000),
            writes: scale.pick(1_000, 5_000, 25_000, 50_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} objects of {OBJECT} B per thread, each written {} times",
            self.rounds, self.writes
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    // Allocated together by one thread, so neighbours in memory.
    let handed: Vec<std::sync::Mutex<Option<Box<[u8; OBJECT]>>>> = (0..exec.threads())
        .map(|i| std::sync::Mutex::new(Some(Box::new([i as u8; OBJECT]))))
        .collect();
    let phases = Phases::start();
    let sums = exec.run(|| {
        rayon::broadcast(|ctx| {
            let first = handed[ctx.index()].lock().unwrap().take();
            let mut sum = first.map_or(0, |o| u64::from(o[0]));
            for round in 0..p.rounds {
                let mut object = Box::new([round as u8; OBJECT]);
                for w in 0..p.writes {
                    object[w % OBJECT] = object[w % OBJECT].wrapping_add(1);
                    std::hint::black_box(&mut object);
                }
                sum = mix(sum, u64::from_le_bytes(*object));
            }
            sum
        })
    });
    phases.end("done");
    sums.into_iter().fold(0, mix)
}
