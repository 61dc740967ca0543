//! A phase's end trims glibc's `malloc` heaps: 100 MB of small blocks that a C library
//! made and freed, below one it keeps (so that glibc's own trimming, at the top of a
//! heap, cannot give them back), go back when the phase ends. Alone in its binary: it
//! measures process RSS.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use arenapool_alloc::{c_heap, phase, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const BLOCKS: usize = 100_000;

#[test]
fn phase_end_trims_the_c_heap() {
    warm_up_thread();
    phase(|| ());
    let before = rss();
    let kept = phase(|| {
        let blocks: Vec<*mut libc::c_void> = (0..BLOCKS)
            // SAFETY: `malloc` of a non-zero size; each block is freed once below, or
            // kept and freed at the end.
            .map(|_| unsafe { libc::malloc(1000) })
            .collect();
        assert!(blocks.iter().all(|b| !b.is_null()), "malloc failed");
        for &block in &blocks[..BLOCKS - 1] {
            // SAFETY: each block came from `malloc` above and is freed once.
            unsafe { libc::free(block) };
        }
        let heap = c_heap().expect("glibc has mallinfo2");
        assert!(
            heap.free >= 64 * MIB,
            "the blocks were not freed into the heaps: {heap:?}"
        );
        blocks[BLOCKS - 1]
    });
    let after = rss();
    // SAFETY: the last block, from `malloc`, freed once.
    unsafe { libc::free(kept) };

    eprintln!(
        "C heap: before {:.1} MiB, after the phase +{:.1} MiB",
        before as f64 / MIB as f64,
        mib_diff(after, before)
    );
    assert!(
        after <= before + 16 * MIB,
        "RSS after the phase is {:.1} MiB above the start",
        mib_diff(after, before)
    );
}
