//! S1 on one thread: 1,000 results of 50,000 f64 built with scratch churn inside
//! `with_arena`; after dropping them, RSS is back within 16 MiB of where it started.
//! Alone in its binary: it measures process RSS.
mod common;

use arenapool_alloc::{with_arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const TASKS: usize = 1_000;

#[test]
fn s1_single_thread_rss_returns_after_drop() {
    warm_up_thread();
    let before = rss();

    let (results, mut labels): (Vec<Vec<f64>>, Vec<String>) =
        with_arena(|| (0..TASKS).map(s1_task).unzip());
    let during = rss();
    for (i, r) in results.iter().enumerate() {
        check_s1(i, r);
    }
    // Keep 10% of the small labels, as the field report's program does.
    labels.retain(|l| l.ends_with("0-label"));
    labels.shrink_to_fit();
    let kept: usize = labels.iter().map(|l| l.capacity()).sum::<usize>() + labels.capacity() * 24;
    drop(results);
    let after = rss();

    eprintln!(
        "S1 single thread, arenapool: before {:.1} MiB, after run +{:.1} MiB, after drop +{:.1} MiB (kept {kept} B)",
        before as f64 / MIB as f64,
        mib_diff(during, before),
        mib_diff(after, before),
    );
    assert!(
        during > before + 300 * MIB,
        "the workload did not touch its memory"
    );
    assert!(
        after <= before + 16 * MIB + kept,
        "RSS after drop is {:.1} MiB above the start",
        mib_diff(after, before)
    );

    // The same workload without an arena, for comparison (printed, not asserted).
    let plain: Vec<(Vec<f64>, String)> = (0..TASKS).map(s1_task).collect();
    drop(plain);
    eprintln!(
        "S1 single thread, plain jemalloc: after drop +{:.1} MiB",
        mib_diff(rss(), before)
    );
    assert_eq!(labels.len(), TASKS / 10);
}
