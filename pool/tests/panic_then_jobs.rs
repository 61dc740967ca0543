//! What must be true, 4: a panic inside a job reaches the caller after cleanup, and the
//! pool goes on: 100 more jobs run correctly and the RSS bound of S1 still holds.

mod common;

use std::panic::{self, AssertUnwindSafe};

use arenapool_alloc::{live_arenas, rss};
use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TASKS: usize = 40;

#[test]
fn panic_in_a_job_then_more_jobs() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    pool.run(common::warm_workers);
    let before = rss();

    // A job that has allocated a lot when one of its tasks panics. The default hook,
    // under RUST_BACKTRACE, would symbolise a backtrace on the panicking worker, and
    // std keeps the symbol tables (tens of MiB) for the rest of the process: memory
    // that escapes the job. Print the message alone.
    panic::set_hook(Box::new(|info| eprintln!("expected: {info}")));
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.run(|| {
            (0..400)
                .into_par_iter()
                .map(|i| {
                    let r = common::s1_task(i);
                    assert!(i != 300, "task 300 fails");
                    r
                })
                .collect::<Vec<_>>()
        })
    }));
    drop(panic::take_hook());
    let payload = caught.expect_err("the job's panic did not reach the caller");
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or_default();
    assert_eq!(message, "task 300 fails");
    // The job has ended: the pool's arenas, and only those, are held.
    assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
    assert_eq!(live_arenas(), 2);
    let after_panic = rss();
    let mut indices: Vec<_> = pool.arena_indices().into_iter().map(Some).collect();
    indices.sort();

    for j in 0..100 {
        let ((workers, results), report) =
            pool.run_with_report(|| (common::worker_arenas(), common::s1_job(j * TASKS, TASKS)));
        let mut workers = workers;
        workers.sort();
        assert_eq!(workers, indices, "job {j}: workers left the pool's arenas");
        assert_eq!(report.arenas, pool.arena_indices());
        assert_eq!(results.len(), TASKS);
        for (k, r) in results.iter().enumerate() {
            common::check_s1(j * TASKS + k, r);
        }
        assert_eq!(live_arenas(), 2);
    }
    let after = rss();
    eprintln!("panic_then_jobs: {}", common::show("RSS before", before));
    eprintln!(
        "panic_then_jobs: {}",
        common::show("RSS after the panic", after_panic)
    );
    eprintln!(
        "panic_then_jobs: {}",
        common::show("RSS after 100 more jobs", after)
    );
    assert!(
        after_panic <= before + (16 << 20),
        "the panicked job kept memory"
    );
    assert!(after <= before + (16 << 20), "RSS bound of S1 broken");
    drop(pool);
    assert_eq!(live_arenas(), 0, "a dropped pool still holds arenas");
}
