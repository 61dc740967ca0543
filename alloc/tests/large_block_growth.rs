//! A block that `RawAlloc::realloc` grows by small steps (CPython's `BytesIO` grows by
//! an eighth) moves a few times, each time to at least twice its size, not at every
//! step: what it leaves behind adds up to about its final size. Its contents are kept,
//! and its usable size is at least what was asked for at every step.

use arenapool_alloc::{ArenaAlloc, RawAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const MIB: usize = 1 << 20;

#[test]
fn a_block_grown_by_eighths_moves_a_few_times() {
    let mut size = MIB;
    let mut block = RawAlloc::alloc(size, 16);
    assert!(!block.is_null());
    // SAFETY: the block holds `size` bytes.
    unsafe { block.write_bytes(7, size) };
    let (mut steps, mut moves) = (0, 0);
    while size < 96 * MIB {
        let grown = size + size / 8;
        // SAFETY: `block` is a live block of `RawAlloc`'s, made with this alignment,
        // not used again unless null is returned.
        let moved = unsafe { RawAlloc::realloc(block, grown, 16) };
        assert!(!moved.is_null());
        // SAFETY: `moved` is live and holds at least `grown` bytes (checked below
        // before the write); the first `size` bytes were kept from `block`.
        unsafe {
            assert!(RawAlloc::usable_size(moved) >= grown);
            assert_eq!(*moved, 7);
            assert_eq!(*moved.add(size - 1), 7);
            moved.add(size).write_bytes(7, grown - size);
        }
        moves += usize::from(moved != block);
        steps += 1;
        (block, size) = (moved, grown);
    }
    // SAFETY: live, freed once.
    unsafe { RawAlloc::free(block) };
    // 1 MiB to 96 MiB by eighths: 39 steps; by doublings, 7 moves at most.
    assert!(
        moves <= 8,
        "{moves} moves in {steps} steps of a block grown by eighths to {} MiB",
        size / MIB
    );
}
