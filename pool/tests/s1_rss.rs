//! What must be true, 1: S1 through the pool gives the memory back.
//!
//! 2 threads, 4,000 tasks of 50,000 f64 with scratch churn, workers warmed by freeing
//! 1 MiB each, 10% of the small labels kept. After the results are dropped, RSS is at
//! most 16 MiB above where it was before the phase, plus what is kept.

mod common;

use arenapool_alloc::{live_arenas, rss};
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TASKS: usize = 4_000;

#[test]
fn s1_results_dropped_rss_returns() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    drop(std::hint::black_box(vec![1u8; 1 << 20]));
    pool.run(common::warm_workers);

    let before = rss();
    let (results, report) = pool.run_with_report(|| common::s1_job(0, TASKS));
    let after_run = rss();
    assert_eq!(results.len(), TASKS);
    for (i, r) in results.iter().enumerate() {
        common::check_s1(i, r);
    }

    let kept: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 10 == 0)
        .map(|(_, (_, label))| label)
        .collect();
    let after_drop = rss();
    let bound = before + (16 << 20) + common::kept_bytes(&kept);

    eprintln!("s1_rss: {}", common::show("RSS before", before));
    eprintln!("s1_rss: {}", common::show("RSS after the phase", after_run));
    eprintln!("s1_rss: {}", common::show("RSS after dropping", after_drop));
    eprintln!("s1_rss: {}", common::show("bound", bound));
    eprintln!("s1_rss: report: {report}");
    let memory = arenapool_alloc::memory();
    eprintln!(
        "s1_rss: {memory}; {}",
        common::show("metadata", memory.metadata)
    );
    assert_eq!(kept.len(), TASKS / 10);
    assert!(
        after_run > before + (TASKS * common::S1_LEN * 8) * 9 / 10,
        "the results were not resident: the test measures nothing"
    );
    assert!(
        after_drop <= bound,
        "RSS after dropping the results is too high"
    );
    assert_eq!(live_arenas(), 2, "the job took arenas beyond the pool's");
}
