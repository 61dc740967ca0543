//! A phase's end trims glibc's `malloc` heaps: 100 MB of small blocks that a C library
//! made and freed, below one it keeps (so that glibc's own trimming, at the top of a
//! heap, cannot give them back), go back when the phase ends. Alone in its binary: it
//! measures process RSS.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use arenapool_alloc::ArenaAlloc;
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn phase_end_trims_the_c_heap() {
    check_phase_end_trims_the_c_heap();
}
