//! `RawAlloc` blocks made in a phase go back to the OS when they are freed after it:
//! 200 blocks of 1 MiB made (half of them grown from 512 KiB by `realloc`) by two
//! threads in a phase, freed after it ended; RSS is back within 16 MiB of where it
//! started. (Outside a phase `RawAlloc`'s arenas decay as jemalloc's do, over seconds.)
//! Alone in its binary: it measures process RSS.
mod common;

use arenapool::RawAlloc;
use common::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const BLOCKS: usize = 200;
const THREADS: usize = 2;

/// A `RawAlloc` block as an address, so that it can move between threads.
struct Block(usize);

/// Thread `t`'s blocks: touched 1 MiB blocks, every other one grown from 512 KiB.
fn make_blocks(t: usize) -> Vec<Block> {
    (0..BLOCKS / THREADS)
        .map(|k| {
            let fill = (t * BLOCKS + k) as u8;
            let p = if k % 2 == 0 {
                RawAlloc::alloc(MIB, 64)
            } else {
                let half = RawAlloc::alloc(MIB / 2, 64);
                assert!(!half.is_null());
                // SAFETY: a fresh block of MIB / 2 bytes.
                unsafe { half.write_bytes(fill, MIB / 2) };
                // SAFETY: `half` is a live block of `RawAlloc`'s, aligned to 64.
                unsafe { RawAlloc::realloc(half, MIB, 64) }
            };
            assert!(!p.is_null() && RawAlloc::owns(p));
            // SAFETY: `p` is a live block of MIB bytes.
            unsafe { p.write_bytes(fill, MIB) };
            Block(p as usize)
        })
        .collect()
}

#[test]
fn raw_blocks_of_a_phase_go_back_when_freed_after_it() {
    warm_up_thread();
    // `RawAlloc`'s arenas outside phases are made on first use: before the baseline.
    // SAFETY: a live block of `RawAlloc`'s, freed once.
    unsafe { RawAlloc::free(RawAlloc::alloc(MIB, 64)) };
    let start = rss();

    let blocks: Vec<Vec<Block>> = arenapool::phase(|| {
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| s.spawn(move || make_blocks(t)))
                .collect();
            threads.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    assert!(!arenapool::phase_is_open());
    let during = rss();
    assert_touched("RawAlloc in a phase", start, during, 150 * MIB);

    for (t, blocks) in blocks.into_iter().enumerate() {
        for (k, Block(addr)) in blocks.into_iter().enumerate() {
            let p = addr as *mut u8;
            let fill = (t * BLOCKS + k) as u8;
            // SAFETY: `p` is a live block of MIB bytes of `RawAlloc`'s, freed once.
            unsafe {
                assert_eq!((*p, *p.add(MIB / 2), *p.add(MIB - 1)), (fill, fill, fill));
                RawAlloc::free(p);
            }
        }
    }
    let now = rss();
    assert_back("RawAlloc in a phase", start, during, now, 16 * MIB);
}
