//! Cross-thread free, in the manner of xmalloc-test: producer threads allocate objects
//! of random small sizes and hand them over in batches through a bounded channel;
//! consumer threads free them. Every free is remote.

use std::fmt;
use std::sync::mpsc::sync_channel;
use std::sync::Mutex;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

const BATCH: usize = 64;
const BATCHES_IN_FLIGHT: usize = 256;

/// Size of the producer/consumer phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Objects each producer allocates.
    objects: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            objects: scale.pick(20_000, 2_000_000, 3_500_000, 10_000_000),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} objects of 16-512 B per producer, batches of {BATCH}",
            self.objects
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let threads = exec.threads();
    let sum = if threads < 2 {
        // One thread cannot run both ends of a bounded channel: produce, then consume.
        let (tx, rx) = std::sync::mpsc::channel();
        exec.run(|| produce(0, p.objects, |b| tx.send(b).is_ok()));
        drop(tx);
        consume(rx.iter())
    } else {
        // Threads pair up: even ones produce, the next odd one consumes.
        let pairs = threads / 2;
        let channels: Vec<_> = (0..pairs)
            .map(|_| sync_channel(BATCHES_IN_FLIGHT))
            .collect();
        let ends: Vec<_> = channels
            .into_iter()
            .map(|(tx, rx)| (Mutex::new(Some(tx)), Mutex::new(Some(rx))))
            .collect();
        let sums = exec.run(|| {
            rayon::broadcast(|ctx| {
                let (pair, consumer) = (ctx.index() / 2, ctx.index() % 2 == 1);
                let Some((tx, rx)) = ends.get(pair) else {
                    return 0; // an odd thread out
                };
                if consumer {
                    let rx = rx.lock().unwrap().take().expect("one consumer per pair");
                    consume(rx.iter())
                } else {
                    let tx = tx.lock().unwrap().take().expect("one producer per pair");
                    produce(pair as u64, p.objects, |b| tx.send(b).is_ok());
                    0
                }
            })
        });
        sums.into_iter().fold(0, mix)
    };
    phases.end("done");
    sum
}

fn produce(seed: u64, objects: usize, mut send: impl FnMut(Vec<Vec<u8>>) -> bool) {
    let mut rng = Rng::new(seed);
    let mut batch = Vec::with_capacity(BATCH);
    for i in 0..objects {
        let len = rng.range(16, 512);
        batch.push(vec![(i % 255 + 1) as u8; len]);
        let full = batch.len() == BATCH || i + 1 == objects;
        if full && !send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH))) {
            return;
        }
    }
}

fn consume(batches: impl Iterator<Item = Vec<Vec<u8>>>) -> u64 {
    let mut sum = 0u64;
    for batch in batches {
        for object in batch {
            sum = sum.wrapping_add(object.len() as u64 * object[0] as u64);
        }
    }
    sum
}
