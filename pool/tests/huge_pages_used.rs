//! Huge pages, used and given back whole: S1's results are faulted in as huge pages,
//! go back when dropped (RSS at most 16 MiB above where it was), and the next job gets
//! huge pages again. Skipped, with the reason, where the kernel gives no huge pages.
//! Alone in its binary: it measures RSS.

mod common;

use arenapool_alloc::rss;
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TASKS: usize = 1_000;

#[test]
fn s1_results_are_in_huge_pages_and_go_back_whole() {
    if let Some(why) = common::no_huge_pages() {
        eprintln!("huge_pages_used: skipped: {why}");
        return;
    }
    let pool = ArenaPool::builder()
        .num_threads(2)
        .huge_pages(true)
        .build()
        .unwrap();
    pool.run(common::warm_workers);
    let before = rss();
    let results_bytes = TASKS * common::S1_LEN * 8;

    for round in 0..3 {
        // Measured inside the job, before its end gives the scratch memory back
        // (which breaks up the huge pages that results share with it).
        let (results, huge) = pool.run(|| {
            let results = common::s1_job(round * TASKS, TASKS);
            (results, arenapool_alloc::huge_page_rss())
        });
        for (i, r) in results.iter().enumerate() {
            common::check_s1(round * TASKS + i, r);
        }
        drop(results);
        let after = rss();
        eprintln!(
            "huge_pages_used: round {round}: {} in huge pages with {} of results; {}; {}",
            arenapool_alloc::Bytes(huge),
            arenapool_alloc::Bytes(results_bytes),
            common::show("RSS before", before),
            common::show("after dropping them", after)
        );
        assert!(
            huge >= results_bytes / 2,
            "round {round}: only {huge} bytes in huge pages for {results_bytes} bytes of results"
        );
        assert!(
            after <= before + (16 << 20),
            "round {round}: RSS after dropping the results is {} above where it was",
            arenapool_alloc::Bytes(after.saturating_sub(before))
        );
    }
}
