//! A message read from a pipe as CPython's `os.read` reads it, outside phases and
//! scopes, again and again: each read takes a block of the size still to read, writes
//! the 64 KiB piece the pipe gave into it, cuts the block to that piece, and frees it
//! once the piece is copied out. A large block cut small moves to a block of its new
//! size and is freed whole, so the next read's block starts where the last one did:
//! the reads fault no page in again.
//!
//! Process-wide page faults: the only test of its binary. Not with jemalloc's debug
//! build, which fills every block it hands out with junk: each read's block would be
//! written whole, where the test counts on its pages past the piece being left alone.
#![cfg(not(feature = "debug"))]

mod common;

use arenapool_alloc::{set_idle_return, ArenaAlloc, RawAlloc};
use common::minor_faults;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const PIECE: usize = 64 << 10;

/// One message of `size` bytes, read a piece at a time; returns the pieces read.
fn message(size: usize) -> usize {
    let mut remaining = size;
    let mut reads = 0;
    while remaining > 0 {
        let block = RawAlloc::alloc(remaining, 16);
        assert!(!block.is_null());
        let piece = PIECE.min(remaining);
        // SAFETY: the block holds `remaining` bytes, `piece` of them written.
        unsafe { block.write_bytes(1, piece) };
        // CPython's bytes object: the piece and its header.
        // SAFETY: a live block of `RawAlloc`'s, made with this alignment, not used
        // again unless null is returned.
        let block = unsafe { RawAlloc::realloc(block, piece + 33, 16) };
        assert!(!block.is_null());
        // SAFETY: the piece is still there, and the block is freed once.
        unsafe {
            assert_eq!(*block.add(piece - 1), 1);
            RawAlloc::free(block);
        }
        remaining -= piece;
        reads += 1;
    }
    reads
}

#[test]
fn a_message_read_in_pieces_into_blocks_of_its_remaining_size_faults_no_page_in_again() {
    // No give-back for quiet: only the bound may give pages back here.
    set_idle_return(None);
    for size in [8 << 20, 64 << 20] {
        message(size);
        let before = minor_faults();
        let mut pieces = 0;
        for _ in 0..4 {
            pieces += message(size);
        }
        let faults = minor_faults() - before;
        let pages = i64::try_from(pieces * PIECE / 4096).unwrap();
        // Each read writes 16 pages: in fresh pages at every read, they are faulted
        // in (as many faults as pages); in the same block's pages, next to none are.
        assert!(
            faults < pages / 20,
            "{faults} page faults in {pieces} reads that wrote {pages} pages ({size}-byte message)"
        );
    }
}
