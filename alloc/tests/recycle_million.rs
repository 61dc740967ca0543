//! A million sequential scopes run in flat memory: arenas are recycled, not created per
//! scope. Alone in its binary: it measures RSS and counts arenas.
mod common;

use std::collections::BTreeSet;

use arenapool_alloc::{current_arena, live_arenas, with_arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn a_million_scopes_grow_rss_by_at_most_one_mib() {
    let scope = |i: usize| {
        with_arena(|| {
            let v = std::hint::black_box(vec![i as u8; 64 + i % 512]);
            (v[0], current_arena())
        })
    };
    // Warm up: the first scopes create the arena and jemalloc's structures.
    let mut seen = BTreeSet::new();
    for i in 0..10_000 {
        seen.insert(scope(i).1);
    }
    let before = rss();
    for i in 0..1_000_000 {
        let (byte, arena) = scope(i);
        assert_eq!(byte, i as u8);
        seen.insert(arena);
    }
    let after = rss();
    eprintln!(
        "1,000,000 scopes: RSS {:.2} MiB -> {:.2} MiB ({:+.3} MiB), arenas used: {:?}",
        before as f64 / MIB as f64,
        after as f64 / MIB as f64,
        mib_diff(after, before),
        seen
    );
    assert!(
        after <= before + MIB,
        "RSS grew by {:.2} MiB",
        mib_diff(after, before)
    );
    assert_eq!(seen.len(), 1, "one arena, recycled: {seen:?}");
    assert!(
        seen.iter().all(Option::is_some),
        "every scope ran in an arena"
    );
    assert_eq!(live_arenas(), 0);
    assert_eq!(current_arena(), None);
}
