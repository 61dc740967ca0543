//! What must be true, 3: a loop of 100,000 small jobs runs in flat memory.
//!
//! The pool's arenas serve every job; RSS grows by at most 1 MiB over the loop, no
//! arena is taken beyond the pool's one per worker, and dropping the pool releases
//! them all.

use arenapool_alloc::{live_arenas, rss, Bytes};
use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const JOBS: usize = 100_000;

fn small_job(j: usize) -> (usize, usize) {
    let out: Vec<Vec<u8>> = (0..4)
        .into_par_iter()
        .map(|k| vec![(j + k) as u8 | 1; 512])
        .collect();
    (out.iter().map(Vec::len).sum(), live_arenas())
}

#[test]
fn many_small_jobs_run_in_flat_memory() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    // Warm up: thread caches, rayon's queues and the first arena exist before measuring.
    for j in 0..1_000 {
        pool.run(|| small_job(j));
    }
    let before = rss();
    let mut most_arenas = 0;
    for j in 0..JOBS {
        let (len, arenas) = pool.run(|| small_job(j));
        assert_eq!(len, 4 * 512);
        most_arenas = most_arenas.max(arenas);
    }
    let after = rss();
    eprintln!(
        "s3_many_jobs: RSS before {} after {} jobs {} (growth {} B); most arenas in use {}",
        Bytes(before),
        JOBS,
        Bytes(after),
        after as i64 - before as i64,
        most_arenas
    );
    assert_eq!(
        most_arenas, 2,
        "jobs should use the pool's two arenas, no more"
    );
    assert!(after <= before + (1 << 20), "RSS grew by more than 1 MiB");
    drop(pool);
    assert_eq!(
        live_arenas(),
        0,
        "an arena is still held after the pool is gone"
    );
}
