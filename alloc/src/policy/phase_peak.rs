//! The bounds on what arenas keep free while work runs: the phase arenas while a phase
//! is open, and the arenas that serve blocks outside phases. Once their free pages pass
//! [`bound`], they give them back.
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
//!
//! The arenas that serve blocks outside phases ([`outside_arenas`]: jemalloc's own, and
//! `RawAlloc`'s) no longer give a freed extent of 8 MiB or more back inside the free
//! (see [`crate::work::route`]): their freed pages decay over 10 s. Work whose blocks
//! grow (joblib's workers pickle each batch of results into one buffer, larger as the
//! batches grow) would keep hundreds of MiB free for those seconds (a loky worker: 250
//! to 340 MiB above its start, where loky restarts a worker at 300 MB). The same count
//! and look bound them: large frees into them, outside scopes, are counted, and when
//! their free pages pass [`bound`] they are purged. A buffer reused in a loop stays
//! below it.
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

/// Large frees into one set of arenas, counted between looks at what they hold.
struct Kept {
    /// Bytes freed into the set since the last look.
    freed: AtomicUsize,
    /// A thread is looking (only one at a time: the others go on).
    looking: AtomicBool,
}

impl Kept {
    const fn new() -> Self {
        Kept {
            freed: AtomicUsize::new(0),
            looking: AtomicBool::new(false),
        }
    }

    /// Counts `size` bytes just freed into the set, and looks at what `arenas` (the
    /// set) hold once [`LOOK_EVERY`] bytes were freed.
    #[inline]
    fn freed<I: Iterator<Item = u32>>(&self, size: usize, arenas: impl Fn() -> I) {
        if self.freed.fetch_add(size, Ordering::Relaxed) + size >= LOOK_EVERY {
            self.look(arenas);
        }
    }

    /// Looks at the pages `arenas` hold and gives their free ones back if they pass
    /// [`bound`]. Runs inside the allocator: nothing here allocates or unwinds, and a
    /// control call that fails leaves the pages for the next look.
    #[cold]
    #[inline(never)]
    fn look<I: Iterator<Item = u32>>(&self, arenas: impl Fn() -> I) {
        // In a section: a `fork` waits for the look to end, so that no child inherits
        // the flag below set by a thread it does not have.
        let _section = fork::section();
        if self.looking.swap(true, Ordering::Acquire) {
            return;
        }
        self.freed.store(0, Ordering::Relaxed);
        if ctl::refresh_stats().is_ok() {
            let (live, free) = arenas()
                .filter_map(|i| ctl::arena_figures(i).ok())
                .fold((0, 0), |(live, free), a| (live + a.active, free + a.dirty));
            if free > bound(live) {
                for index in arenas() {
                    let _ = purge::purge(index);
                }
            }
        }
        self.looking.store(false, Ordering::Release);
    }
}

/// The phase arenas' frees while a phase is open.
static PHASE: Kept = Kept::new();

/// The frees into the arenas that serve blocks outside phases.
static OUTSIDE: Kept = Kept::new();

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
    PHASE.freed(size, || {
        PHASE_ARENAS
            .indices()
            .filter(|&i| !table::arena(i).idle.load(Ordering::Relaxed))
    });
}

/// Counts `size` bytes just freed, outside scopes, into an arena that serves blocks
/// outside phases (one of jemalloc's, or `RawAlloc`'s for blocks outside phases), and
/// looks at what those arenas hold once [`LOOK_EVERY`] bytes were freed.
#[inline]
pub(crate) fn freed_outside(size: usize) {
    OUTSIDE.freed(size, outside_arenas);
}

/// Whether arena `index` is one of this crate's that serves blocks outside phases
/// (`RawAlloc`'s).
#[inline]
pub(crate) fn serves_outside(index: u32) -> bool {
    table::arena(index).serves() == Use::Raw
}

/// The process's arenas that serve blocks outside phases and scopes: jemalloc's
/// automatic ones, its arena for oversize blocks, and `RawAlloc`'s arenas for blocks
/// outside phases.
pub(crate) fn outside_arenas() -> impl Iterator<Item = u32> {
    let count = ctl::arenas_count().unwrap_or(0).min(ctl::ARENAS_ALL);
    (0..count).filter(|&i| !table::is_ours(i) || serves_outside(i))
}
