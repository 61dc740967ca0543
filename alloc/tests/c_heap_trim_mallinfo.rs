//! As `c_heap_trim.rs`, where glibc has no `mallinfo2` (before 2.33: made so here by
//! fault injection, which fails its look-up): the figures come from `mallinfo`, say
//! so, and a phase's end trims glibc's `malloc` heaps on them: 100 MB of small blocks
//! that a C library made and freed, below one it keeps, go back when the phase ends.
//! Alone in its binary: it measures process RSS. (With `mallinfo` not read, `c_heap`
//! answers `None` and the first assertion fails; the RSS check alone passed here even
//! without the trim.)
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use arenapool_alloc::faults::{self, Fault};
use arenapool_alloc::{c_heap, phase, ArenaAlloc, CHeapSource};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const BLOCKS: usize = 100_000;

#[test]
fn phase_end_trims_the_c_heap_without_mallinfo2() {
    // Before the first look-up, which is made once per process.
    faults::fail_every(Fault::Mallinfo2, 1);
    assert_eq!(c_heap().expect("glibc").source, CHeapSource::Mallinfo);
    faults::fail_every(Fault::Mallinfo2, 0);
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
        let heap = c_heap().expect("glibc has mallinfo");
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
