//! What must be true, 5: four threads each run 100 jobs on one pool at once. Jobs run
//! side by side on the pool's arenas, every result is correct, and once the last one
//! has ended the RSS bound holds.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use arenapool_alloc::{live_arenas, rss};
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const CALLERS: usize = 4;
const JOBS: usize = 100;
const TASKS: usize = 10;

#[test]
fn four_callers_share_one_pool() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    pool.run(common::warm_workers);
    let before = rss();
    let running = AtomicUsize::new(0);
    let mut indices: Vec<_> = pool.arena_indices().into_iter().map(Some).collect();
    indices.sort();
    let most_running = AtomicUsize::new(0);

    std::thread::scope(|s| {
        for caller in 0..CALLERS {
            let (pool, running, most_running, indices) = (&pool, &running, &most_running, &indices);
            s.spawn(move || {
                for j in 0..JOBS {
                    let first = (caller * JOBS + j) * TASKS;
                    let (workers, results) = pool.run(|| {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most_running.fetch_max(now, Ordering::SeqCst);
                        let workers = common::worker_arenas();
                        let results = common::s1_job(first, TASKS);
                        running.fetch_sub(1, Ordering::SeqCst);
                        (workers, results)
                    });
                    let mut workers = workers;
                    workers.sort();
                    assert_eq!(workers, *indices, "workers left the pool's arenas");
                    assert_eq!(results.len(), TASKS);
                    for (k, r) in results.iter().enumerate() {
                        common::check_s1(first + k, r);
                    }
                }
            });
        }
    });
    let after = rss();
    eprintln!("concurrent_callers: {}", common::show("RSS before", before));
    eprintln!(
        "concurrent_callers: {} ({} jobs)",
        common::show("RSS after", after),
        CALLERS * JOBS
    );
    eprintln!(
        "concurrent_callers: at most {} jobs ran at once",
        most_running.load(Ordering::SeqCst)
    );
    assert_eq!(live_arenas(), 2, "jobs took arenas beyond the pool's");
    assert!(after <= before + (16 << 20), "RSS bound of S1 broken");
}
