//! A large buffer freed and allocated again in a loop outside phases is faulted in
//! once, not at every use (jemalloc gives a free extent of 8 MiB and more back inside
//! the free unless the arena's oversize threshold says otherwise), both through
//! `ArenaAlloc` and through `RawAlloc`, also a block larger than the 64 MiB that the
//! arenas may always keep free (their bound follows the largest block freed lately);
//! and what the loop kept goes back at the next phase's end. One test in the binary:
//! it reads jemalloc's figures for the process.

use std::hint::black_box;

use arenapool_alloc::{phase, stats, ArenaAlloc, RawAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const MIB: usize = 1 << 20;
const BLOCK: usize = 16 * MIB;
const ROUNDS: i64 = 20;
/// Above the 64 MiB that the arenas may keep free whatever their blocks.
const LARGER: usize = 96 * MIB;

/// This thread's minor page faults so far.
fn faults() -> i64 {
    // SAFETY: an all-zero `rusage` is a valid value for `getrusage` to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `rusage` to fill, for the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0);
    usage.ru_minflt
}

/// Page faults over `ROUNDS` rounds of `round` (which allocates, writes every page
/// of, and frees a block), after a first round that faults it in.
fn faults_of(mut round: impl FnMut()) -> i64 {
    round();
    let before = faults();
    for _ in 0..ROUNDS {
        round();
    }
    faults() - before
}

/// `RawAlloc`'s round: a block of `size` bytes allocated, written, freed.
fn raw_round(size: usize) {
    let block = RawAlloc::alloc(size, 16);
    assert!(!block.is_null());
    // SAFETY: the block was just allocated with `size` bytes, and is freed once.
    unsafe {
        block.write_bytes(1, size);
        RawAlloc::free(black_box(block));
    }
}

/// Without the fix every round faults the whole block of `size` bytes in again:
/// `ROUNDS` times its pages (81,920 for 16 MiB). With it, the loop faults nothing; the
/// bound leaves room for the idle return giving the block back twice in the middle of
/// the loop on a machine that descheduled it for seconds.
fn assert_reused(what: &str, size: usize, faults: i64) {
    let pages = (size / 4096) as i64;
    assert!(
        faults < 3 * pages,
        "{what}: {faults} page faults in {ROUNDS} rounds of a {} MiB block \
         ({pages} pages: faulted in again at every use)",
        size / MIB
    );
}

#[test]
fn a_large_buffer_reused_outside_phases_is_faulted_in_once() {
    let arena_alloc = faults_of(|| {
        let block = black_box(vec![1u8; BLOCK]);
        assert_eq!(block[BLOCK - 1], 1);
    });
    assert_reused("ArenaAlloc", BLOCK, arena_alloc);
    assert_reused("RawAlloc", BLOCK, faults_of(|| raw_round(BLOCK)));
    assert_reused("RawAlloc", LARGER, faults_of(|| raw_round(LARGER)));

    // What the loops kept is given back by the next phase's end: in jemalloc's arena
    // for `ArenaAlloc`'s block, in `RawAlloc`'s for its own.
    let kept = |stats: arenapool_alloc::Stats| [stats.automatic.dirty, stats.raw.dirty];
    let before = kept(stats());
    assert!(
        before.iter().all(|&bytes| bytes >= BLOCK),
        "the loops kept {before:?} bytes free"
    );
    phase(|| ());
    let after = kept(stats());
    assert!(
        after.iter().all(|&bytes| bytes < MIB),
        "{after:?} bytes of the {before:?} kept are still held after a phase's end"
    );
}
