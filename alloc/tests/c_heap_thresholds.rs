//! glibc adapts its `mmap` threshold to a large block freed elsewhere, as it would
//! have had the block been its own: after a block of 1 MiB freed through
//! `c_heap_freed_elsewhere`, a `malloc` of 768 KiB comes from glibc's heap instead of
//! being mapped on its own. Alone in its binary: glibc's thresholds are the process's.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use arenapool_alloc::{c_heap_freed_elsewhere, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// How many blocks glibc has mapped on their own (`mallinfo`'s `hblks`).
fn mapped_blocks() -> i32 {
    // SAFETY: `mallinfo` takes no argument and returns a plain struct.
    #[allow(deprecated)]
    unsafe {
        libc::mallinfo().hblks
    }
}

/// Whether glibc maps a block of `size` bytes on its own.
fn mapped_alone(size: usize) -> bool {
    let before = mapped_blocks();
    // SAFETY: a block of glibc's, freed once, never read or written.
    unsafe {
        let block = libc::malloc(size);
        assert!(!block.is_null());
        let mapped = mapped_blocks() > before;
        libc::free(std::hint::black_box(block));
        mapped
    }
}

#[test]
fn glibc_adapts_to_a_block_freed_elsewhere() {
    // The program's own allocations are jemalloc's: nothing else here frees a large
    // block into glibc, whose thresholds are then still its first ones.
    // The look frees a block glibc mapped, of 256 KiB: glibc adapts to that size, and
    // would still map a block of 768 KiB.
    assert!(
        mapped_alone(256 << 10),
        "glibc maps 256 KiB on its own at first"
    );
    c_heap_freed_elsewhere(1 << 20);
    assert!(
        !mapped_alone(768 << 10),
        "after a block of 1 MiB freed elsewhere, glibc serves 768 KiB from its heap"
    );
}
