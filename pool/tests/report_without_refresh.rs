//! `run_with_report` reads what the pool's arenas gave back from their extent hooks: it
//! makes no refresh of jemalloc's statistics, which costs time in proportion to the
//! arenas in the process. Alone in its binary: jemalloc's statistics epoch is
//! process-wide.

use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

/// jemalloc's statistics epoch: read without a refresh, and one higher after each.
fn epoch() -> u64 {
    tikv_jemalloc_ctl::epoch::read().expect("epoch")
}

#[test]
fn a_report_makes_no_refresh_and_counts_what_went_back() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    pool.run(|| ()); // the arenas' first start and end
    let before = epoch();
    let (sum, report) = pool.run_with_report(|| {
        (0..64u32)
            .into_par_iter()
            .map(|i| {
                vec![i + 1; 1 << 18]
                    .iter()
                    .map(|&x| u64::from(x))
                    .sum::<u64>()
            })
            .sum::<u64>()
    });
    assert_eq!(sum, (1..=64u64).sum::<u64>() << 18);
    assert_eq!(
        epoch(),
        before,
        "the report refreshed jemalloc's statistics"
    );
    // 64 MiB of scratch, at most two tasks' worth alive at a time; freed pages kept
    // during the job, given back at its end.
    assert!(
        report.returned >= 1 << 20,
        "the job's scratch did not count as given back: {report}"
    );
    eprintln!("report_without_refresh: {report}");
}
