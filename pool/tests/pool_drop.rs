//! A pool's life from the process's point of view: scopes opened inside its jobs give
//! their memory back, and a pool dropped while idle leaves no thread bound, no arena
//! held and nothing resident beyond jemalloc's metadata.

mod common;

use arenapool_alloc::{live_arenas, rss, with_arena, Bytes};
use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const THREADS: usize = 2;

#[test]
fn scopes_in_jobs_and_a_dropped_pool_give_everything_back() {
    // Warm jemalloc's structures for a pool of this size, then take the baseline
    // before the pool exists.
    drop(ArenaPool::builder().num_threads(THREADS).build().unwrap());
    let before = rss();
    let pool = ArenaPool::builder().num_threads(THREADS).build().unwrap();

    // Tasks that each open a scope: the scope's arena, not the pool's, holds what it
    // allocates; the results escape both and are dropped after the job.
    let results: Vec<(Vec<f64>, Option<u32>, Option<u32>)> = pool.run(|| {
        (0..400)
            .into_par_iter()
            .map(|i| {
                let (result, scope) = with_arena(|| {
                    let scratch = common::filled(i as f64, common::S1_LEN);
                    (scratch.clone(), arenapool_alloc::current_arena())
                });
                (result, scope, arenapool_alloc::current_arena())
            })
            .collect()
    });
    let indices = pool.arena_indices();
    let bindings: Vec<(Option<u32>, Option<u32>)> = results
        .iter()
        .map(|(_, scope, after)| (*scope, *after))
        .collect();
    for (i, (result, _, _)) in results.iter().enumerate() {
        assert_eq!(result[7], i as f64);
    }
    let held = rss();
    drop(results);
    let after_results = rss();
    drop(pool);
    let after_pool = rss();
    eprintln!(
        "pool_drop: RSS before the pool {}, holding the results {}, after dropping them {}, \
         after dropping the pool {}",
        Bytes(before),
        Bytes(held),
        Bytes(after_results),
        Bytes(after_pool)
    );
    assert!(
        held > before + (400 * common::S1_LEN * 8) * 9 / 10,
        "the results were not resident: the test measures nothing"
    );
    assert!(
        after_results <= before + (16 << 20),
        "results made in scopes inside a job were not given back"
    );
    for (scope, after) in bindings {
        assert!(
            !indices.contains(&scope.unwrap()),
            "a scope used a pool arena"
        );
        assert!(indices.contains(&after.unwrap()), "a worker left its arena");
    }
    assert_eq!(live_arenas(), 0, "a dropped pool still holds arenas");
    assert!(
        after_pool <= before + (2 << 20),
        "a dropped pool left memory resident"
    );
}
