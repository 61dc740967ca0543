//! What workers keep between jobs: their thread caches, and nothing more.
//!
//! A job frees 1 GiB of small objects, two workers holding 64 MiB of them at a time, of every size a thread cache holds (8 B
//! to 32 KiB), in shuffled order, so that the objects left cached are scattered over
//! many pages. After it ends, RSS is within the documented bound per worker of where
//! it started: what the workers' caches keep resident (8 MiB per worker, see
//! docs/design.md), not what the job freed.

mod common;

use arenapool_alloc::{rss, Bytes};
use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const THREADS: usize = 2;
/// The bound per worker stated in docs/design.md.
const PER_WORKER: usize = 8 << 20;

/// A small deterministic generator (xorshift).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Allocates 32 MiB of objects of every cached size, then frees them in shuffled order.
fn churn(task: u64) -> usize {
    let mut state = task.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut objects: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    while bytes < 32 << 20 {
        // Sizes spread over every small class and the cached large ones.
        let size = match next(&mut state) % 4 {
            0 => 8 + (next(&mut state) % 120) as usize,
            1 => 128 + (next(&mut state) % 1_920) as usize,
            2 => 2_048 + (next(&mut state) % 14_336) as usize,
            _ => 16_384 + (next(&mut state) % 16_384) as usize,
        };
        objects.push(vec![(size % 251) as u8 + 1; size]);
        bytes += size;
    }
    for i in (1..objects.len()).rev() {
        let j = (next(&mut state) % (i as u64 + 1)) as usize;
        objects.swap(i, j);
    }
    let count = objects.len();
    for object in objects {
        drop(object);
    }
    count
}

#[test]
fn workers_keep_only_their_caches_between_jobs() {
    let pool = ArenaPool::builder().num_threads(THREADS).build().unwrap();
    pool.run(common::warm_workers);
    let before = rss();
    let (objects, report) =
        pool.run_with_report(|| (0..32u64).into_par_iter().map(churn).sum::<usize>());
    let after = rss();
    let bound = before + THREADS * PER_WORKER;
    eprintln!(
        "worker_caches: {objects} objects (1 GiB) freed in the job; RSS before {}, after {} \
         (kept {}), bound {}; {report}",
        Bytes(before),
        Bytes(after),
        Bytes(after.saturating_sub(before)),
        Bytes(bound)
    );
    assert!(
        report.returned >= 48 << 20,
        "the job freed little: the test measures nothing ({report})"
    );
    assert!(after <= bound, "workers kept more than their caches");
}
