//! Arenas left to `retain_freed_on_use`: they give freed pages back at once until a
//! thread bound to them allocates a large block, or their first purge, then keep them
//! until `return_freed_if_used`. The tests run one after the other (a lock), and alone in
//! their binary: they measure process RSS.
mod common;

use std::sync::Mutex;

use arenapool_alloc::{Arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Ends the work of `arena`, which must have been used, and checks that the end gave
/// back the pages it kept: RSS less than 8 MiB above `before`.
fn the_end_gives_back_what_was_kept(arena: &Arena, before: usize) {
    assert!(
        arena.return_freed_if_used().expect("the end"),
        "it was used"
    );
    let after = rss();
    eprintln!("after the end: {:+.1} MiB", mib_diff(after, before));
    assert!(
        after < before + 8 * MIB,
        "the end did not give the kept pages back: {:+.1} MiB",
        mib_diff(after, before)
    );
}

#[test]
fn a_large_block_makes_the_arena_keep_freed_pages_until_its_end() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let arena = standing_by();
    let before = rss();
    // One block of 32 MiB, touched and freed: its allocation switches the arena to
    // keeping what is freed in it, before the block exists, so its free gives nothing
    // back (an arena still standing by would purge it inside the free). Measured while
    // the thread is bound, as a pool's worker always is.
    let kept = arena.enter(|| {
        let block = vec![1u8; 32 * MIB];
        drop(std::hint::black_box(block));
        rss()
    });
    eprintln!("kept after the work: {:+.1} MiB", mib_diff(kept, before));
    assert!(
        kept > before + 24 * MIB,
        "the arena gave the freed block back: {:+.1} MiB",
        mib_diff(kept, before)
    );
    the_end_gives_back_what_was_kept(&arena, before);
}

#[test]
fn an_arena_nothing_happened_in_is_not_used() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let arena = standing_by();
    // Bound, but allocating nothing of its own.
    arena.enter(|| std::hint::black_box(()));
    assert!(!arena.return_freed_if_used().expect("the end"));
    // And again: the end left it as it was.
    arena.retain_freed_on_use().expect("standing by");
    assert!(!arena.return_freed_if_used().expect("the end"));
}

#[test]
fn small_blocks_alone_switch_the_arena_at_its_first_purge() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let arena = standing_by();
    let before = rss();
    // Objects of 1 KiB, far more than the thread's cache holds, so slabs fill and
    // empty as the objects are freed; no block is large enough to switch the arena.
    // Its first emptied slab is purged (it stands by), which asks for the switch; from
    // then on the arena keeps its freed pages. The switch is made by a thread of its
    // own, so the work is repeated until its pages are seen kept.
    let mut blocks = list(16 * MIB, 1024);
    let kept = churn_small_until_kept(&arena, &mut blocks, before);
    eprintln!("kept after the work: {:+.1} MiB", mib_diff(kept, before));
    assert!(
        kept > before + 12 * MIB,
        "the arena went on giving freed pages back: {:+.1} MiB after 30 s",
        mib_diff(kept, before)
    );
    the_end_gives_back_what_was_kept(&arena, before);
}

#[test]
fn an_arena_that_keeps_freed_pages_is_given_back_at_its_end() {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let arena = Arena::new().expect("an arena");
    arena.return_freed().expect("idle");
    arena.retain_freed().expect("keeping freed pages");
    let before = rss();
    let mut blocks = list(64 * MIB, MIB);
    let after = arena.enter(|| {
        // Allocated and freed: the arena's counts are where they were, and its free
        // pages hold 64 MiB.
        churn(&mut blocks, 64 * MIB, MIB);
        // It keeps freed pages already: this changes nothing, and the end must give
        // them back although the counts did not move.
        arena.retain_freed_on_use().expect("no change");
        arena.return_freed_if_used().expect("the end");
        rss()
    });
    eprintln!("after the end: {:+.1} MiB", mib_diff(after, before));
    assert!(
        after < before + 8 * MIB,
        "the end left the arena's free pages resident: {:+.1} MiB",
        mib_diff(after, before)
    );
}
