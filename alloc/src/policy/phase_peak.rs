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
//! So large frees into the phase arenas while a phase is open are counted, and one of
//! them now and then looks at the pages the phase arenas hold (jemalloc's statistics,
//! refreshed): if their free pages pass [`bound`] (64 MiB and four times the largest
//! block freed lately, or an eighth of their live blocks if more), the arenas that hold
//! the most are purged, the fullest first, until what the rest hold is under it (see
//! [`Fullest`]; all of them if the eight fullest are not enough). Work that reuses what
//! it frees stays below it or passes it now and then; work that cannot reuse it gives
//! it back each time it passes it. The largest block's share is the
//! working set of a buffer used again and again (with the blocks it grew out of, see
//! [`RawAlloc::realloc`](crate::RawAlloc::realloc)); it costs peak memory: the rayon
//! pool above peaked at 306–333 MiB in a phase and 302–312 MiB without one with twice
//! the largest block, where a bound of 64 MiB or an eighth of the live blocks gave
//! 265–278 and 262–265 (three runs each, on a loaded 2-core machine); with four times,
//! 326–327 MiB in a phase and 281–307 MiB without (two runs, the machine quiet).
//!
//! What the arenas hold free stays under the bound whether one arena or all of them
//! are purged at a look; purging only as many as it takes leaves the others' pages to
//! the threads that use them. scikit-learn's random forest, fitted on two threads in a
//! phase (12 trees on 2 million rows, each tree's arrays freed and made again for the
//! next), faulted 136,130–137,043 pages in three fits, against 148,493–151,537 when
//! every arena was purged at each look and 54,334–54,338 with glibc; the rayon pool
//! above peaked at 326–338 MiB in a phase (four runs), against 319–334 MiB.
//!
//! A look refreshes every arena's statistics in jemalloc: with a look every 16 MiB
//! freed, a 16 MiB block allocated, touched a byte a page and freed in a loop spent 91%
//! of its instructions there (139,000 a round, callgrind). So the next look waits
//! until the free pages could pass the bound (see [`Kept::look`]): that loop now looks
//! every third round, and spends 2.6 times fewer instructions.
//!
//! The arenas that serve blocks outside phases ([`outside_arenas`]: jemalloc's own, and
//! `RawAlloc`'s) no longer give a freed extent of 8 MiB or more back inside the free
//! (see [`crate::work::route`]): their freed pages decay over 10 s. Work whose blocks
//! grow (joblib's workers pickle each batch of results into one buffer, larger as the
//! batches grow) would keep hundreds of MiB free for those seconds (a loky worker: 250
//! to 340 MiB above its start, where loky restarts a worker at 300 MB). The same count
//! and look bound them ([`bound_outside`]): large frees into them, outside scopes, are
//! counted, and when their free pages pass the bound they are purged. A buffer reused
//! in a loop stays below it. With a bound of 64 MiB (or an eighth of the live blocks)
//! the workers of the joblib report's program, whose pickles reach 20 to 80 MB, passed
//! it at nearly every batch and faulted their buffers in again each time; with twice
//! the largest block too, as a batch's end left its results, its pickle and the blocks
//! the pickle grew out of. Those blocks now go back as the buffer leaves them (see
//! [`RawAlloc::realloc`](crate::RawAlloc::realloc)), and the results and the pickle stay
//! below three times the largest block: the workers faulted 0.12 M pages over the job,
//! against 1.16 M with glibc and 1.13 to 1.31 M with twice, and held up to 175 MiB
//! above their start right after it.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::mechanism::table::Use;
use crate::mechanism::{ctl, fork, table};
use crate::policy::purge;
use crate::work::route::PHASE_ARENAS;

/// The fewest bytes freed into a set of arenas between two looks at what they hold.
const LOOK_EVERY: usize = 16 << 20;

/// The most the phase arenas may hold in free pages while a phase is open, with `live`
/// bytes in live blocks and `largest` the largest block freed into them lately: 64 MiB
/// and four times that block, or an eighth of what is live, or 8 MiB per phase arena
/// (one per CPU), whichever is most.
///
/// Four times, where [`bound_outside`] takes three: a buffer that work makes again and
/// again leaves about three times its size free at the end of each round (the buffer,
/// the blocks it grew out of, the untouched pages past its end that its last move took,
/// and what it was made of or into), and a phase's work is what the program waits for.
/// A joblib parent receiving the report's results passed twice at nearly every batch
/// and faulted the next batch's buffers in again. Its pages all go back when the phase
/// ends.
fn bound(live: usize, largest: usize) -> usize {
    kept_free(live, largest, 4).max(PHASE_ARENAS.indices().count() * (8 << 20))
}

/// The most the arenas that serve blocks outside phases may hold in free pages, with
/// `live` bytes in live blocks and `largest` the largest block freed into them lately:
/// 64 MiB and three times that block, or an eighth of what is live if more. A buffer
/// that work frees and takes again in a loop (a worker's pickle of each batch of
/// results, with the results it was made of, about as large again) stays below it
/// however large it is; the blocks it grew out of are not kept (see the module's docs).
fn bound_outside(live: usize, largest: usize) -> usize {
    kept_free(live, largest, 3)
}

/// 64 MiB and `times` the largest block freed lately (`largest`), or an eighth of the
/// `live` bytes if more: the share of both bounds.
fn kept_free(live: usize, largest: usize, times: usize) -> usize {
    (64usize << 20)
        .saturating_add(largest.saturating_mul(times))
        .max(live / 8)
}

/// Large frees into one set of arenas, counted between looks at what they hold.
struct Kept {
    /// The most the set may hold in free pages, from its live bytes and the largest
    /// block freed into it lately; grows by at most an eighth of the live bytes' growth.
    bound: fn(usize, usize) -> usize,
    /// Bytes freed into the set since the last look.
    freed: AtomicUsize,
    /// Bytes that may be freed into the set before its free pages can pass its bound:
    /// the next look comes then (at least [`LOOK_EVERY`] after the last).
    until: AtomicUsize,
    /// The largest block freed into the set lately: the largest freed since, less a
    /// sixteenth at each look.
    largest: AtomicUsize,
    /// A thread is looking (only one at a time: the others go on).
    looking: AtomicBool,
}

impl Kept {
    const fn new(bound: fn(usize, usize) -> usize) -> Self {
        Kept {
            bound,
            freed: AtomicUsize::new(0),
            until: AtomicUsize::new(LOOK_EVERY),
            largest: AtomicUsize::new(0),
            looking: AtomicBool::new(false),
        }
    }

    /// Counts `size` bytes just freed into the set, and looks at what `arenas` (the
    /// set) hold once enough were freed that their free pages may pass the bound.
    #[inline]
    fn freed<I: Iterator<Item = u32>>(&self, size: usize, arenas: impl Fn() -> I) {
        // A load first: most frees are not the largest, and leave the line unwritten.
        if size > self.largest.load(Ordering::Relaxed) {
            self.largest.fetch_max(size, Ordering::Relaxed);
        }
        if self.freed.fetch_add(size, Ordering::Relaxed) + size
            >= self.until.load(Ordering::Relaxed)
        {
            self.look(arenas);
        }
    }

    /// Looks at the pages `arenas` hold and, if their free ones pass the bound, gives
    /// back those of the fullest arenas until the rest are under it (see [`Fullest`]).
    /// Runs inside the allocator: nothing here allocates or unwinds, and a control call
    /// that fails leaves the pages for the next look.
    ///
    /// Refreshing jemalloc's statistics reads every arena's. So the next look waits
    /// until the free pages could pass the bound: they grow by at most what is freed (counted here), and
    /// the bound shrinks by at most an eighth of it (the live bytes it frees), so a
    /// look that finds `free` under `bound` can wait for `(bound - free) * 8 / 9`
    /// bytes, figured with the bound the next look will have at least (with the
    /// largest block less its sixteenth), and never sooner than [`LOOK_EVERY`]. Pages
    /// freed without a count here (the tail a shrinking `realloc` leaves, small blocks'
    /// emptied slabs) are seen at the next look, as they were when looks came every
    /// [`LOOK_EVERY`] bytes.
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
        let largest = self.largest.load(Ordering::Relaxed);
        let fades = largest - largest / 16;
        // A larger block freed meanwhile stays.
        let _ = self
            .largest
            .compare_exchange(largest, fades, Ordering::Relaxed, Ordering::Relaxed);
        let mut until = LOOK_EVERY;
        if ctl::refresh_stats().is_ok() {
            let (mut live, mut free) = (0, 0);
            let mut fullest = Fullest::default();
            for index in arenas() {
                if let Ok(a) = ctl::arena_figures(index) {
                    live += a.active;
                    free += a.dirty;
                    fullest.note(index, a.dirty);
                }
            }
            let bound = (self.bound)(live, largest);
            if free > bound {
                free = fullest.give_back_above(free, bound);
                if free > bound {
                    for index in arenas() {
                        let _ = purge::purge(index);
                    }
                    free = 0;
                }
            }
            let room = (self.bound)(live, fades).saturating_sub(free);
            until = until.max(room / 9 * 8);
        }
        self.until.store(until, Ordering::Relaxed);
        self.looking.store(false, Ordering::Release);
    }
}

/// How many of a set's arenas a look ranks by their free pages (see [`Fullest`]).
const RANKED: usize = 8;

/// The arenas of a set that hold the most free pages, as a look reads them: up to
/// [`RANKED`], the fullest first. In an array on the stack: a look runs inside the
/// allocator, where nothing may allocate.
#[derive(Default)]
struct Fullest {
    /// (arena, free bytes), the fullest first; `len` of them are set.
    ranked: [(u32, usize); RANKED],
    len: usize,
}

impl Fullest {
    /// Ranks arena `index`, which holds `free` bytes in free pages.
    fn note(&mut self, index: u32, free: usize) {
        if free == 0 {
            return;
        }
        let at = self.ranked[..self.len].partition_point(|&(_, f)| f >= free);
        if at == RANKED {
            return;
        }
        let end = self.len.min(RANKED - 1);
        self.ranked.copy_within(at..end, at + 1);
        self.ranked[at] = (index, free);
        self.len = end + 1;
    }

    /// Gives back the ranked arenas' free pages, the fullest first, until what the set
    /// holds free (`free` bytes, as read) is at most `bound`, and returns what it then
    /// holds by the same reading. An arena whose work takes again what it freed keeps
    /// it, as long as the others' pages are enough to bring the set under the bound.
    fn give_back_above(&self, mut free: usize, bound: usize) -> usize {
        for &(index, held) in &self.ranked[..self.len] {
            if free <= bound {
                break;
            }
            if purge::purge(index).is_ok() {
                free = free.saturating_sub(held);
            }
        }
        free
    }
}

/// The phase arenas' frees while a phase is open.
static PHASE: Kept = Kept::new(bound);

/// The frees into the arenas that serve blocks outside phases.
static OUTSIDE: Kept = Kept::new(bound_outside);

/// Whether arena `index` is a phase arena that keeps freed pages (a phase is open).
#[inline]
pub(crate) fn keeps(index: u32) -> bool {
    let arena = table::arena(index);
    arena.serves() == Use::Phase && !arena.idle.load(Ordering::Relaxed)
}

/// Counts `size` bytes just freed into a phase arena that keeps freed pages ([`keeps`]),
/// and looks at what the phase arenas hold once their free pages could pass the bound.
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
/// looks at what those arenas hold once their free pages could pass the bound.
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn ranked(fullest: &Fullest) -> Vec<(u32, usize)> {
        fullest.ranked[..fullest.len]
            .iter()
            .map(|&(index, free)| (index, free / MIB))
            .collect()
    }

    /// The fullest arenas first; none with nothing free; once [`RANKED`] are ranked, a
    /// fuller one takes the place of the emptiest.
    #[test]
    fn the_fullest_arenas_are_ranked_first() {
        let mut fullest = Fullest::default();
        for (index, free) in [(1, 5), (2, 0), (3, 9), (4, 7), (5, 7)] {
            fullest.note(index, free * MIB);
        }
        assert_eq!(ranked(&fullest), [(3, 9), (4, 7), (5, 7), (1, 5)]);
        for index in 10..20u32 {
            fullest.note(index, index as usize * MIB);
        }
        let expected: Vec<(u32, usize)> = (12..20u32).rev().map(|i| (i, i as usize)).collect();
        assert_eq!(ranked(&fullest), expected);
        fullest.note(30, MIB); // emptier than every ranked one
        assert_eq!(ranked(&fullest), expected);
    }

    /// Arenas are given back the fullest first, and no more of them once the rest is
    /// under the bound. (Arena 0, jemalloc's first, stands for each: a purge of it
    /// gives back what it holds free, which nothing here needs.)
    #[test]
    fn arenas_are_given_back_until_the_rest_is_under_the_bound() {
        let mut fullest = Fullest::default();
        for free in [40, 30, 20, 10] {
            fullest.note(0, free * MIB);
        }
        assert_eq!(fullest.give_back_above(100 * MIB, 50 * MIB), 30 * MIB);
        assert_eq!(fullest.give_back_above(100 * MIB, 100 * MIB), 100 * MIB);
        assert_eq!(fullest.give_back_above(100 * MIB, 0), 0);
        assert_eq!(
            Fullest::default().give_back_above(100 * MIB, 50 * MIB),
            100 * MIB
        );
    }
}
