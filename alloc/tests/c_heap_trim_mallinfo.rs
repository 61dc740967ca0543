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
use arenapool_alloc::{c_heap, ArenaAlloc, CHeapSource};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn phase_end_trims_the_c_heap_without_mallinfo2() {
    // Before the first look-up, which is made once per process.
    faults::fail_every(Fault::Mallinfo2, 1);
    assert_eq!(c_heap().expect("glibc").source, CHeapSource::Mallinfo);
    faults::fail_every(Fault::Mallinfo2, 0);
    check_phase_end_trims_the_c_heap();
}
