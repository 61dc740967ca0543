//! Huge pages that keep one small live block each are not kept resident whole: at the
//! end of a job, the free part of every such huge page goes back, and when the blocks
//! are dropped the rest does too. Skipped, with the reason, where the kernel gives no
//! huge pages. Alone in its binary: it measures RSS.

mod common;

use arenapool_alloc::{rss, Bytes};
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

/// Huge pages' worth of blocks in the job.
const HUGE_PAGES: usize = 128;
/// Blocks of 64 KiB per huge page; one of each run of this many is kept.
const PER_HUGE_PAGE: usize = 32;
const BLOCK: usize = 64 << 10;

#[test]
fn partially_free_huge_pages_give_their_free_part_back() {
    if let Some(why) = common::no_huge_pages() {
        eprintln!("huge_pages_partial: skipped: {why}");
        return;
    }
    let pool = ArenaPool::builder()
        .num_threads(1)
        .huge_pages(true)
        .build()
        .unwrap();
    pool.run(common::warm_workers);
    let before = rss();

    let (kept, during, huge) = pool.run(|| {
        let blocks: Vec<Vec<u8>> = (0..HUGE_PAGES * PER_HUGE_PAGE)
            .map(|i| vec![i as u8; BLOCK])
            .collect();
        let during = rss();
        let huge = arenapool_alloc::huge_page_rss();
        let kept: Vec<Vec<u8>> = blocks.into_iter().step_by(PER_HUGE_PAGE).collect();
        (kept, during, huge)
    });
    let after_job = rss();
    let kept_bytes = kept.len() * BLOCK;
    eprintln!(
        "huge_pages_partial: {}; {} during the job, {} of it in huge pages; {}; {kept_bytes} \
         bytes kept in {} blocks",
        common::show("RSS before", before),
        Bytes(during),
        Bytes(huge),
        common::show("after the job", after_job),
        kept.len()
    );
    assert!(
        huge >= HUGE_PAGES * BLOCK * PER_HUGE_PAGE / 2,
        "the blocks were not in huge pages: the test measures nothing"
    );
    // Whole huge pages kept would be 256 MiB; the kept blocks are 8 MiB.
    assert!(
        after_job <= before + kept_bytes + (16 << 20),
        "RSS after the job is {} above where it was, with {} of blocks alive",
        Bytes(after_job.saturating_sub(before)),
        Bytes(kept_bytes)
    );
    for (i, block) in kept.iter().enumerate() {
        assert!(block.iter().all(|&b| b == (i * PER_HUGE_PAGE) as u8));
    }
    drop(kept);
    let after_drop = rss();
    eprintln!(
        "huge_pages_partial: {}",
        common::show("after dropping the kept blocks", after_drop)
    );
    assert!(
        after_drop <= before + (16 << 20),
        "RSS after dropping the kept blocks is {} above where it was",
        Bytes(after_drop.saturating_sub(before))
    );
}
