//! Results of a phase dropped by a rayon pool's workers at once, after the phase ended,
//! go back: jemalloc purges an idle arena inside each free, but skips the purge of a
//! free made while another thread's purge of that arena runs, and that purge covers
//! only the pages that were free when it started. Without arenapool's wait for it, 20 to
//! 80 MiB of such a burst stayed resident now and then. Thirty rounds of 1,000 results of
//! 400 KB, made by two threads (so in both phase arenas) and dropped by the pool's two
//! workers; after each, RSS is back within 16 MiB of where it started. Alone in its
//! binary: it measures process RSS.
mod common;

use common::*;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const ROUNDS: usize = 30;
const RESULTS: usize = 1_000;

#[test]
fn results_dropped_by_workers_at_once_go_back() {
    let pool = warmed_pool(2);
    warm_up_thread();
    let start = rss();
    for round in 0..ROUNDS {
        let results: Vec<Vec<f64>> = arenapool::phase(|| {
            std::thread::scope(|s| {
                let halves: Vec<_> = [0..RESULTS / 2, RESULTS / 2..RESULTS]
                    .into_iter()
                    .map(|half| s.spawn(move || half.map(|i| s1_task(i).0).collect::<Vec<_>>()))
                    .collect();
                halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
            })
        });
        let during = rss();
        assert_touched("results of a phase", start, during, 300 * MIB);
        pool.install(|| results.into_par_iter().for_each(drop));
        assert_back(
            &format!("round {round}, dropped by the workers"),
            start,
            during,
            rss(),
            16 * MIB,
        );
    }
}
