//! The bound on what the phase arenas keep free while a phase is open: once their free
//! pages pass [`bound`], they give them back.
//!
//! While a phase is open the phase arenas keep the pages freed in them for reuse (dirty
//! decay -1), which is what makes a phase's work as fast as jemalloc or faster. But they
//! serve threads that are not arenapool's, whose work frees large blocks as it likes,
//! and a freed block that no later one fits stays resident until the phase ends: a
//! rayon pool that made, derived and dropped columns of 20 MB, each round's a little
//! longer than the last, peaked at 680–748 MiB in a phase, against 246–251 MiB without
//! one (`cargo run --release --example phase_peak`). jemalloc's own arenas give such
//! blocks back at once (blocks of 8 MiB and more go to an arena of its own with decay
//! 0), but doing the same in the phase arenas (any decay but -1 makes jemalloc purge a
//! free extent of 8 MiB or more when it is freed, also one that grew so large by
//! coalescing with its free neighbours) made the suite's S1 work in a phase 1.4x slower,
//! and S2's 1.7x.
//!
//! So large frees into the phase arenas while a phase is open are counted, and every
//! [`LOOK_EVERY`] bytes one of them looks at the pages the phase arenas hold (jemalloc's
//! statistics, refreshed): if their free pages pass [`bound`] (64 MiB, or an eighth of
//! their live blocks), each is purged. Work that reuses what it frees stays below it or
//! passes it now and then (the suite's S1 in a phase: 3 purges in 57 looks; S2: 2 in
//! 72); work that cannot reuse it gives it back each time it passes it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::mechanism::table::Use;
use crate::mechanism::{ctl, fork, table};
use crate::policy::purge;
use crate::work::route::PHASE_ARENAS;

/// How many bytes freed into the phase arenas make a look at what they hold.
const LOOK_EVERY: usize = 16 << 20;

/// The most the phase arenas may hold in free pages while a phase is open, with `live`
/// bytes in live blocks: 64 MiB, an eighth of what is live, or 8 MiB per phase arena
/// (one per CPU), whichever is most.
fn bound(live: usize) -> usize {
    (64 << 20)
        .max(live / 8)
        .max(PHASE_ARENAS.indices().count() * (8 << 20))
}

/// Bytes freed into the phase arenas since the last look.
static FREED: AtomicUsize = AtomicUsize::new(0);

/// A thread is looking (only one at a time: the others go on).
static LOOKING: AtomicBool = AtomicBool::new(false);

/// Whether arena `index` is a phase arena that keeps freed pages (a phase is open).
#[inline]
pub(crate) fn keeps(index: u32) -> bool {
    let arena = table::arena(index);
    arena.serves() == Use::Phase && !arena.idle.load(Ordering::Relaxed)
}

/// Counts `size` bytes just freed into a phase arena that keeps freed pages ([`keeps`]),
/// and looks at what the phase arenas hold once [`LOOK_EVERY`] bytes were freed.
#[inline]
pub(crate) fn freed(size: usize) {
    if FREED.fetch_add(size, Ordering::Relaxed) + size >= LOOK_EVERY {
        look();
    }
}

/// Looks at the pages the phase arenas hold and gives their free ones back if they
/// pass [`bound`]. Runs inside the allocator: nothing here allocates or unwinds, and a
/// control call that fails leaves the pages for the next look or the phase's end.
#[cold]
#[inline(never)]
fn look() {
    // In a section: a `fork` waits for the look to end, so that no child inherits the
    // flag below set by a thread it does not have.
    let _section = fork::section();
    if LOOKING.swap(true, Ordering::Acquire) {
        return;
    }
    FREED.store(0, Ordering::Relaxed);
    if ctl::refresh_stats().is_ok() {
        let keeping = || {
            PHASE_ARENAS
                .indices()
                .filter(|&i| !table::arena(i).idle.load(Ordering::Relaxed))
        };
        let (live, free) = keeping()
            .filter_map(|i| ctl::arena_figures(i).ok())
            .fold((0, 0), |(live, free), a| (live + a.active, free + a.dirty));
        if free > bound(live) {
            for index in keeping() {
                let _ = purge::purge(index);
            }
        }
    }
    LOOKING.store(false, Ordering::Release);
}
