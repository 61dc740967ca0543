//! Results that escape a scope and are dropped later, on the same thread and on another
//! thread, still go back to the OS at once. Alone in its binary: it measures RSS.
mod common;

use arenapool_alloc::{with_arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn escaped_results_return_when_dropped_anywhere() {
    warm_up_thread();
    let before = rss();

    // Dropped later on the same thread, after another scope has come and gone.
    let results: Vec<Vec<f64>> = with_arena(|| (0..500).map(|i| s1_task(i).0).collect());
    with_arena(|| drop(std::hint::black_box(vec![3u8; 8 * MIB])));
    assert!(rss() > before + 150 * MIB);
    drop(results);
    let same_thread = rss();

    // Dropped on another thread, which is itself inside a scope of its own.
    let results: Vec<Vec<f64>> = with_arena(|| (0..500).map(|i| s1_task(i).0).collect());
    let before_send = rss();
    std::thread::spawn(move || {
        warm_up_thread();
        with_arena(|| {
            for (i, r) in results.iter().enumerate() {
                check_s1(i, r);
            }
            drop(results);
        })
    })
    .join()
    .unwrap();
    let other_thread = rss();

    // Small objects escaping too: 1,000,000 boxed values (64 MB, four times the margin
    // below) freed on another thread.
    let small: Vec<Box<[u64; 8]>> =
        with_arena(|| (0..1_000_000).map(|i| Box::new([i; 8])).collect());
    std::thread::spawn(move || drop(small)).join().unwrap();
    let small_freed = rss();

    eprintln!(
        "escape: before {:.1} MiB; dropped on same thread +{:.1}; before send +{:.1}; \
         dropped on other thread +{:.1}; small objects freed elsewhere +{:.1}",
        before as f64 / MIB as f64,
        mib_diff(same_thread, before),
        mib_diff(before_send, before),
        mib_diff(other_thread, before),
        mib_diff(small_freed, before),
    );
    assert!(
        before_send > before + 150 * MIB,
        "the workload did not touch its memory"
    );
    for (what, rss) in [
        ("same thread", same_thread),
        ("other thread", other_thread),
        ("small objects", small_freed),
    ] {
        assert!(
            rss <= before + 16 * MIB,
            "{what}: RSS {:.1} MiB above the start",
            mib_diff(rss, before)
        );
    }
}
