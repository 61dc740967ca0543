//! A block asked of `RawAlloc` outside phases when its arena cannot be made (those
//! arenas are made on first use; here every control call fails, as `arenas.create`
//! does when no address space is left for a new arena's metadata): it comes from an
//! arena of this crate's that exists, where a phase's freed memory stays mapped. Alone
//! in its binary: the faults are process-wide, and nothing else may have made the
//! arenas outside phases first. (Without the fallback the block is null.)

use arenapool_alloc::faults::{self, Fault};
use arenapool_alloc::{phase, ArenaAlloc, RawAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const MIB: usize = 1 << 20;

#[test]
fn a_block_whose_arena_cannot_be_made_comes_from_one_that_exists() {
    phase(|| {
        let block = RawAlloc::alloc(8 * MIB, 64);
        assert!(!block.is_null() && RawAlloc::owns(block));
        // SAFETY: a block of RawAlloc's, freed once.
        unsafe { RawAlloc::free(block) };
    });

    faults::fail_every(Fault::Control, 1);
    let block = RawAlloc::alloc(4 * MIB, 64);
    faults::fail_every(Fault::Control, 0);
    assert!(
        faults::injected(Fault::Control) > 0,
        "no control call was made: the arena existed"
    );
    assert!(
        !block.is_null(),
        "no block, though a phase arena has 8 MiB of freed memory"
    );
    assert!(RawAlloc::owns(block));
    // SAFETY: a block of RawAlloc's, 4 MiB long, freed once.
    unsafe {
        block.write_bytes(1, 4 * MIB);
        RawAlloc::free(block);
    }
}
