//! A loky worker's batch, outside phases and scopes, again and again: 128 blocks of
//! 400 KB made, then a buffer grown by eighths to hold them all (as CPython's
//! `BytesIO` grows a pickle), then all of it freed. The buffer lives apart from the
//! blocks it is made of and leaves no chain of blocks behind, so what the batch frees
//! stays below the bound on what the arenas keep free: the next batch faults none of
//! its pages in again.
//!
//! Process-wide page faults: the only test of its binary.

mod common;

use arenapool_alloc::{set_idle_return, ArenaAlloc, RawAlloc};
use common::minor_faults;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const BLOCKS: usize = 128;
const BLOCK: usize = 400_000;

/// One batch, its buffer made with `start` bytes; returns the bytes it wrote.
fn batch(start: usize) -> usize {
    let blocks: Vec<*mut u8> = (0..BLOCKS)
        .map(|_| {
            let block = RawAlloc::alloc(BLOCK, 16);
            assert!(!block.is_null());
            // SAFETY: the block holds `BLOCK` bytes.
            unsafe { block.write_bytes(1, BLOCK) };
            block
        })
        .collect();
    let (mut buffer, mut len, mut room) = (RawAlloc::alloc(start, 16), 0, start);
    assert!(!buffer.is_null());
    for &block in &blocks {
        if len + BLOCK > room {
            room = (len + BLOCK).max(room + room / 8);
            // SAFETY: `buffer` is a live block of `RawAlloc`'s, made with this
            // alignment, not used again unless null is returned.
            buffer = unsafe { RawAlloc::realloc(buffer, room, 16) };
            assert!(!buffer.is_null());
        }
        // SAFETY: both hold `BLOCK` bytes from these offsets; they do not overlap.
        unsafe { buffer.add(len).copy_from_nonoverlapping(block, BLOCK) };
        len += BLOCK;
    }
    for block in blocks {
        // SAFETY: live, freed once.
        unsafe { RawAlloc::free(block) };
    }
    // SAFETY: live, freed once.
    unsafe { RawAlloc::free(buffer) };
    2 * BLOCKS * BLOCK
}

#[test]
fn a_batch_made_again_outside_phases_faults_no_page_in_again() {
    // No give-back for quiet: only the bound may give pages back here.
    set_idle_return(None);
    // Where the buffer starts sets the sizes it moves through; with 1,000,000 bytes,
    // the blocks it grew out of passed the bound at every batch before it moved apart.
    for start in [1_000_000, 1_200_000, 3_000_000] {
        batch(start);
        batch(start);
        let before = minor_faults();
        let mut written = 0;
        for _ in 0..8 {
            written += batch(start);
        }
        let faults = minor_faults() - before;
        let pages = i64::try_from(written / 4096).unwrap();
        // Each batch writes 25,000 pages: given back at each batch, they are faulted
        // in again (200,000 faults in 8); kept, next to none are.
        assert!(
            faults < pages / 20,
            "{faults} page faults in 8 batches that wrote {pages} pages (buffer from {start} bytes)"
        );
    }
}
