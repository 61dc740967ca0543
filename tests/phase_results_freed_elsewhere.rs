//! Results made in a phase, on other threads, and dropped after the phase on yet other
//! threads (a plain one, one inside a `with_arena` scope, a rayon worker) go back to
//! the OS when they are dropped: RSS is back within 16 MiB of where it started after
//! each batch. Alone in its binary: it measures process RSS.
mod common;

use common::*;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

/// Results per batch: 1,000 × 400 KB.
const RESULTS: usize = 1_000;

/// A batch of results made in a phase by two scoped threads.
fn batch_made_in_a_phase() -> Vec<Vec<f64>> {
    let results = arenapool::phase(|| {
        std::thread::scope(|s| {
            let halves: Vec<_> = [0..RESULTS / 2, RESULTS / 2..RESULTS]
                .into_iter()
                .map(|half| s.spawn(move || half.map(|i| s1_task(i).0).collect::<Vec<_>>()))
                .collect();
            halves
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    assert!(!arenapool::phase_is_open());
    results
}

fn check(results: &[Vec<f64>]) {
    assert_eq!(results.len(), RESULTS);
    for (i, r) in results.iter().enumerate() {
        check_s1(i, r, &format!("task-{i:06}-label"));
    }
}

#[test]
fn results_of_a_phase_go_back_when_dropped_on_other_threads() {
    let pool = warmed_pool(2);
    warm_up_thread();
    let start = rss();

    // Dropped on a plain thread.
    let results = batch_made_in_a_phase();
    let during = rss();
    assert_touched("plain thread", start, during, 300 * MIB);
    std::thread::spawn(move || {
        check(&results);
        drop(results);
    })
    .join()
    .unwrap();
    assert_back("dropped on a plain thread", start, during, rss(), 16 * MIB);

    // Dropped on a thread inside a scope of its own.
    let results = batch_made_in_a_phase();
    let during = rss();
    assert_touched("thread in a scope", start, during, 300 * MIB);
    std::thread::spawn(move || {
        arenapool::with_arena(|| {
            assert!(arenapool::current_arena().is_some());
            check(&results);
            drop(results);
        })
    })
    .join()
    .unwrap();
    assert_back("dropped in a scope", start, during, rss(), 16 * MIB);

    // Dropped one by one on a rayon pool's workers.
    let results = batch_made_in_a_phase();
    let during = rss();
    assert_touched("rayon workers", start, during, 300 * MIB);
    check(&results);
    pool.install(|| results.into_par_iter().for_each(drop));
    assert_back("dropped on rayon workers", start, during, rss(), 16 * MIB);
}
