//! `keep_warm`: between back-to-back jobs the pool's free pages stay resident for the
//! next job to reuse, and they go back to the OS once the pool has been idle for the
//! time set, or when it is dropped.

mod common;

use std::time::{Duration, Instant};

use arenapool_alloc::{rss, Bytes};
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TASKS: usize = 1_000;
const RESULTS: usize = TASKS * common::S1_LEN * 8;
const SLACK: usize = 16 << 20;

fn s1(pool: &ArenaPool, first: usize) -> Vec<(Vec<f64>, String)> {
    let results = pool.run(|| common::s1_job(first, TASKS));
    for (k, r) in results.iter().enumerate() {
        common::check_s1(first + k, r);
    }
    results
}

#[test]
fn free_pages_stay_warm_until_the_pool_is_idle_or_dropped() {
    let before = rss();

    // Kept for an hour: results dropped between jobs stay resident, and the next job
    // reuses their pages instead of growing by as much again.
    let pool = ArenaPool::builder()
        .num_threads(2)
        .keep_warm(Duration::from_secs(3600))
        .build()
        .unwrap();
    let held = {
        let results = s1(&pool, 0);
        let held = rss();
        drop(results);
        held
    };
    let warm = rss();
    let held_again = {
        let results = s1(&pool, TASKS);
        let held = rss();
        drop(results);
        held
    };
    drop(pool);
    let after_drop = rss();

    // Kept for 20 ms: the pages go back on their own once the pool is idle.
    let pool = ArenaPool::builder()
        .num_threads(2)
        .keep_warm(Duration::from_millis(20))
        .build()
        .unwrap();
    drop(s1(&pool, 0));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut idle = rss();
    while idle > before + SLACK && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        idle = rss();
    }

    eprintln!(
        "keep_warm: RSS before {}; keep_warm(1 h): holding results {}, after dropping them {}, \
         holding the next job's {}, after dropping the pool {}; keep_warm(20 ms): idle {}",
        Bytes(before),
        Bytes(held),
        Bytes(warm),
        Bytes(held_again),
        Bytes(after_drop),
        Bytes(idle)
    );
    assert!(
        held > before + RESULTS * 9 / 10,
        "the results were not resident: the test measures nothing"
    );
    assert!(
        warm > before + RESULTS * 8 / 10,
        "the dropped results' pages were not kept warm"
    );
    // Each worker reuses what its own arena kept; work stealing splits the next job
    // differently, so some pages are new, but far from a second copy.
    assert!(
        held_again <= held + RESULTS / 2,
        "the second job grew instead of reusing the warm pages"
    );
    assert!(after_drop <= before + SLACK, "dropping the pool kept pages");
    assert!(
        idle <= before + SLACK,
        "the idle pool never gave its pages back"
    );
}
