//! Two pools in one process, running S1 jobs at the same time from two threads: each
//! pool's workers stay in its own arenas, and after the results are dropped RSS is back
//! within the S1 bound plus what the workers' caches keep.

mod common;

use std::sync::Barrier;

use arenapool_alloc::{live_arenas, rss, Bytes};
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TASKS: usize = 1_000;
/// What each worker's cache may keep (docs/design.md).
const PER_WORKER: usize = 8 << 20;

#[test]
fn two_pools_side_by_side_give_their_memory_back() {
    let pools = [
        ArenaPool::builder().num_threads(2).build().unwrap(),
        ArenaPool::builder().num_threads(2).build().unwrap(),
    ];
    let (a, b) = (pools[0].arena_indices(), pools[1].arena_indices());
    assert!(a.iter().all(|i| !b.contains(i)), "two pools share an arena");
    for pool in &pools {
        pool.run(common::warm_workers);
    }
    let before = rss();
    let start = Barrier::new(2);
    let (held, workers) = std::thread::scope(|s| {
        let jobs: Vec<_> = pools
            .iter()
            .enumerate()
            .map(|(p, pool)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let (workers, results) =
                        pool.run(|| (common::worker_arenas(), common::s1_job(p * TASKS, TASKS)));
                    for (k, r) in results.iter().enumerate() {
                        common::check_s1(p * TASKS + k, r);
                    }
                    (workers, results)
                })
            })
            .collect();
        let (workers, results): (Vec<_>, Vec<_>) =
            jobs.into_iter().map(|j| j.join().unwrap()).unzip();
        let held = rss();
        drop(results);
        (held, workers)
    });
    let after = rss();
    let bound = before + (16 << 20) + 4 * PER_WORKER;
    eprintln!(
        "two_pools: RSS before {}, holding both jobs' results {}, after dropping them {} \
         (bound {})",
        Bytes(before),
        Bytes(held),
        Bytes(after),
        Bytes(bound)
    );
    assert!(
        held > before + (2 * TASKS * common::S1_LEN * 8) * 9 / 10,
        "the results were not resident: the test measures nothing"
    );
    assert!(
        after <= bound,
        "two pools kept memory after their results were dropped"
    );
    for (p, workers) in workers.iter().enumerate() {
        let mine = pools[p].arena_indices();
        assert!(
            workers.iter().all(|w| w.is_some_and(|w| mine.contains(&w))),
            "pool {p}: a worker left the pool's arenas: {workers:?}"
        );
    }
    assert_eq!(live_arenas(), 4);
}
