//! A program in phases, through the facade: a parallel phase in the pool, a phase on the
//! calling thread in `with_arena`, a streamed phase, and a scope that runs a pool job.
//! After each phase and its results are dropped, RSS is back near where the program
//! started. Alone in its binary: it measures process RSS.
use std::sync::Arc;

use arenapool::{current_arena, live_arenas, rss, trim, with_arena, ArenaAlloc, ArenaPool, Bytes};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const MIB: usize = 1 << 20;
/// Slack over the starting RSS after a phase: jemalloc's metadata for the arenas and
/// threads created on the way, and pages still holding small live objects.
const SLACK: usize = 24 * MIB;

/// A touched block of `len` f64 (`vec!` of a non-zero value writes every page).
fn block(i: usize, len: usize) -> Vec<f64> {
    vec![1.0 + i as f64; len]
}

fn check_back(phase: &str, start: usize) {
    let now = rss();
    eprintln!("{phase}: RSS {} (start {})", Bytes(now), Bytes(start));
    assert!(
        now <= start + SLACK,
        "{phase}: RSS {} is more than {} above the start {}",
        Bytes(now),
        Bytes(SLACK),
        Bytes(start)
    );
}

#[test]
fn phases_give_their_memory_back() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    // Warm up the pool's threads and jemalloc's structures, then take the baseline.
    pool.run(|| {
        (0..64)
            .into_par_iter()
            .map(|i| block(i, 1024).len())
            .sum::<usize>()
    });
    let start = rss();

    // 1. Parallel: 1,000 results of 400 KB with scratch, held, then dropped.
    let (results, report) = pool.run_with_report(|| {
        (0..1_000)
            .into_par_iter()
            .map(|i| {
                let scratch = block(i, 50_000);
                let mut result = block(i, 50_000);
                result[0] = scratch.iter().sum();
                result
            })
            .collect::<Vec<_>>()
    });
    eprintln!("parallel phase: {report}");
    assert!(
        rss() > start + 300 * MIB,
        "the phase did not touch its memory"
    );
    assert_eq!(results[999][1], 1000.0);
    drop(results);
    check_back("after the parallel phase", start);
    // At least the scratch block each worker freed last was given back at the end.
    assert!(report.returned >= 400_000, "{report}");

    // 2. One thread: the same in `with_arena`.
    let results: Vec<Vec<f64>> = with_arena(|| (0..500).map(|i| block(i, 50_000)).collect());
    assert_eq!(current_arena(), None);
    drop(results);
    check_back("after the single-thread phase", start);

    // 3. Streamed: 4 MiB results (below jemalloc's 8 MiB threshold for returning huge
    //    blocks at once by itself) from a shared state, consumed one by one.
    let state = Arc::new(block(7, 1 << 20)); // 8 MiB, shared, never copied
    let shared = Arc::clone(&state);
    let mut count = 0;
    for (i, r) in pool
        .map_stream(0..64usize, move |i| {
            let mut r = block(i, 512 << 10);
            r[0] = shared[i];
            r
        })
        .enumerate()
    {
        assert_eq!(r[1], 1.0 + i as f64);
        count += 1;
    }
    assert_eq!(count, 64);
    drop(state);
    check_back("after the streamed phase", start);

    // 4. A pool job started inside a scope: the scope binds the caller only, the
    //    pool's workers allocate in the pool's arenas; both give their memory back.
    let kept = with_arena(|| {
        let local = block(1, 100_000);
        let par = pool.run(|| {
            (0..200)
                .into_par_iter()
                .map(|i| block(i, 50_000))
                .collect::<Vec<_>>()
        });
        (local, par)
    });
    assert_eq!(kept.1.len(), 200);
    drop(kept);
    check_back("after a job inside a scope", start);

    // Only the pool's arenas, one per worker, are held; none once it is dropped.
    assert_eq!(live_arenas(), 2);
    drop(pool);
    assert_eq!(live_arenas(), 0);
    trim().unwrap();
    check_back("after the pool and trim", start);
}
