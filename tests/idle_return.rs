//! Data built before a phase (on threads of its own, in jemalloc's own arenas), used in
//! the phase, and dropped after it has ended, then the process idle: its pages go back
//! within the idle-return delay, with nothing allocating meanwhile. jemalloc alone
//! keeps them for good (its decay runs only as something allocates or frees). Alone in
//! its binary: it measures process memory.
use std::time::Duration;

use rayon::prelude::*;

mod common;
use common::MIB;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

/// A table of short strings (small blocks, slabs) and numbers (large blocks), built by
/// four threads.
fn build_table() -> Vec<(Vec<String>, Vec<u64>)> {
    let builders: Vec<_> = (0..4u64)
        .map(|b| {
            std::thread::spawn(move || {
                let rows = b * 1_000_000..(b + 1) * 1_000_000;
                let keys = rows.clone().map(|i| format!("key-{i:010}")).collect();
                (keys, rows.collect())
            })
        })
        .collect();
    builders.into_iter().map(|b| b.join().unwrap()).collect()
}

fn heap() -> usize {
    arenapool::memory().resident
}

#[test]
fn memory_dropped_after_a_phase_goes_back_while_idle() {
    assert_eq!(arenapool::idle_return(), Some(Duration::from_secs(1)));
    let start = heap();
    let table = build_table();
    let sum: u64 = arenapool::phase(|| {
        table
            .par_iter()
            .map(|(keys, values)| keys.len() as u64 + values.iter().sum::<u64>())
            .sum()
    });
    assert_eq!(sum, 4_000_000 + (0..4_000_000u64).sum::<u64>());
    let built = heap();
    assert!(
        built > start + 100 * MIB,
        "the table took {} MiB",
        (built - start) / MIB
    );
    drop(table);
    // Far longer than the delay: a figure that never comes back fails.
    common::heap_comes_back(start, built, Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(50))
    });
}
