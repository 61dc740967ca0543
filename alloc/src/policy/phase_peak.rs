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
//! So large frees into the phase arenas while a phase is open are counted (by each
//! thread a MiB at a time, see [`Kept::batched`]), and one of them now and then looks
//! at the pages the phase arenas hold (jemalloc's statistics, refreshed): if their free
//! pages pass [`bound`] (64 MiB and four times the largest block freed lately, or an
//! eighth of their live blocks if more), arenas are purged until what the rest hold is
//! under it: first those whose free pages are the least fresh (see [`Ranked`]; all of
//! them if the eight first are not enough). Work that reuses what it frees stays below
//! it or passes it now and then; work that cannot reuse it gives it back each time it
//! passes it. The largest block's share is the working set of a buffer used again and
//! again (with the blocks it grew out of, see
//! [`RawAlloc::realloc`](crate::RawAlloc::realloc)); it costs peak memory: the rayon
//! pool above peaked at 306–333 MiB in a phase and 302–312 MiB without one with twice
//! the largest block, where a bound of 64 MiB or an eighth of the live blocks gave
//! 265–278 and 262–265 (three runs each, on a loaded 2-core machine); with four times,
//! 326–327 MiB in a phase and 281–307 MiB without (two runs, the machine quiet).
//!
//! What the arenas hold free stays under the bound whether one arena or all of them
//! are purged at a look, and whichever they are; so a look purges only as many as it
//! takes, and the pages a thread freed last, which it is the likeliest to take again
//! (as jemalloc's own decay keeps the pages freed last), last. scikit-learn's random
//! forest, fitted on two threads in a phase (12 trees on 2 million rows, each tree's
//! arrays freed as it ends and made again as the next begins), faulted 95,593–101,572
//! pages in three fits, against 135,124–137,178 when the fullest arena went first,
//! 147,770–151,537 when every arena was purged, and 53,828–54,836 with glibc: as one
//! thread ends a tree, the look gives back the other thread's arena, which holds what
//! its own tree left free a second or more before, instead of the one that just freed
//! its arrays. The price is in peak memory: the rayon pool above peaked at 323–358 MiB
//! in a phase (median 340), against 321–343 MiB (median 330) with the fullest first
//! (eight runs each), as the arenas left are nearer the bound.
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
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

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

/// Bytes a thread frees into a set of arenas before it adds them to the set's count
/// (see [`Kept::batched`]).
const COUNT_EVERY: usize = 1 << 20;

thread_local! {
    /// Bytes the calling thread freed into each set of arenas ([`Kept::slot`]) and has
    /// not yet added to its count. A plain `Cell` without destructor: readable at any
    /// point of a thread's life.
    static UNCOUNTED: [Cell<usize>; 2] = const { [Cell::new(0), Cell::new(0)] };
}

/// Large frees into one set of arenas, counted between looks at what they hold. Alone
/// on its cache lines: every thread that frees into the set writes them now and then.
#[repr(align(128))]
struct Kept {
    /// The set's place in [`UNCOUNTED`].
    slot: usize,
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
    /// When a look last noted what each arena of the set holds free ([`coarse_ms`]).
    seen_at: AtomicU64,
}

impl Kept {
    const fn new(slot: usize, bound: fn(usize, usize) -> usize) -> Self {
        Kept {
            slot,
            bound,
            freed: AtomicUsize::new(0),
            until: AtomicUsize::new(LOOK_EVERY),
            largest: AtomicUsize::new(0),
            looking: AtomicBool::new(false),
            seen_at: AtomicU64::new(0),
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
        let Some(size) = self.batched(size) else {
            return;
        };
        if self.freed.fetch_add(size, Ordering::Relaxed) + size
            >= self.until.load(Ordering::Relaxed)
        {
            self.look(arenas);
        }
    }

    /// `size` bytes just freed by the calling thread, with those it freed before and has
    /// not yet counted, once they reach [`COUNT_EVERY`]: then they are to be counted,
    /// and the thread starts again from 0; until then `None`, and they wait on the
    /// thread.
    ///
    /// The count is one word that every thread freeing into the set writes: when each
    /// of two threads allocated and freed a 64 KiB block in a loop, adding each free to
    /// it at once made the loop take 1.4 times as long outside phases (where plain
    /// jemalloc took the same time as without it), as the threads took turns at its
    /// cache line (`phase/64KiB` in `cargo bench -p arenapool-alloc --bench alloc`).
    /// What waits on threads is at most [`COUNT_EVERY`] each, seen at a later look;
    /// what a thread that ends leaves uncounted, at the next look.
    #[inline]
    fn batched(&self, size: usize) -> Option<usize> {
        UNCOUNTED
            .try_with(|uncounted| {
                let uncounted = &uncounted[self.slot];
                let total = uncounted.get().saturating_add(size);
                if total < COUNT_EVERY {
                    uncounted.set(total);
                    None
                } else {
                    uncounted.set(0);
                    Some(total)
                }
            })
            .unwrap_or(Some(size))
    }

    /// Looks at the pages `arenas` hold and, if their free ones pass the bound, gives
    /// back arenas, those with the least fresh pages first, until the rest are under it
    /// (see [`Ranked`]), and notes what each holds for the next look ([`Kept::see`]).
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
    /// emptied slabs, what waits on the threads to be counted: see [`Kept::batched`])
    /// are seen at the next look, as they were when looks came every [`LOOK_EVERY`]
    /// bytes.
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
            for index in arenas() {
                if let Ok(a) = ctl::arena_figures(index) {
                    live += a.active;
                    free += a.dirty;
                }
            }
            let bound = (self.bound)(live, largest);
            let mut ranked = Ranked::default();
            if free > bound {
                // An arena that holds less than its share of the excess is not ranked.
                let least = ((free - bound) / RANKED).max(1);
                for index in arenas() {
                    match ctl::arena_dirty(index) {
                        Ok(held) if held >= least => {
                            let seen = free_seen(index).map_or(0, |s| s.load(Ordering::Relaxed));
                            ranked.note(index, held, held.saturating_sub(seen));
                        }
                        _ => {}
                    }
                }
                free = ranked.give_back_above(free, bound);
                if free > bound {
                    for index in arenas() {
                        let _ = purge::purge(index);
                    }
                    free = 0;
                    ranked.all_given_back = true;
                }
            }
            self.see(&arenas, &ranked);
            let room = (self.bound)(live, fades).saturating_sub(free);
            until = until.max(room / 9 * 8);
        }
        self.until.store(until, Ordering::Relaxed);
        self.looking.store(false, Ordering::Release);
    }
}

impl Kept {
    /// Notes what each of `arenas` holds free after a look that gave back what `ranked`
    /// says: what it holds now if the last note is [`SEEN_FOR_MS`] old or older, and
    /// otherwise the less of the two, so that what an arena freed since stays fresh
    /// until the next note and what work took back out of its free pages counts at
    /// once.
    fn see<I: Iterator<Item = u32>>(&self, arenas: &impl Fn() -> I, ranked: &Ranked) {
        let now = coarse_ms();
        let renew = now.wrapping_sub(self.seen_at.load(Ordering::Relaxed)) >= SEEN_FOR_MS;
        if renew {
            self.seen_at.store(now, Ordering::Relaxed);
        }
        for index in arenas() {
            let free = if ranked.was_given_back(index) {
                0
            } else if let Ok(held) = ctl::arena_dirty(index) {
                held
            } else {
                continue;
            };
            let Some(seen) = free_seen(index) else {
                continue;
            };
            let kept = if renew {
                free
            } else {
                free.min(seen.load(Ordering::Relaxed))
            };
            seen.store(kept, Ordering::Relaxed);
        }
    }
}

/// What each arena held free as the looks at its set last noted it (see
/// [`Kept::see`]), by index. Apart from the arenas' entries in the table: those are
/// read on every free, and these are written at each look.
static FREE_SEEN: [AtomicUsize; ctl::ARENAS_ALL as usize] =
    [const { AtomicUsize::new(0) }; ctl::ARENAS_ALL as usize];

/// Arena `index`'s note in [`FREE_SEEN`]; `None` beyond it (an index jemalloc never
/// gives).
fn free_seen(index: u32) -> Option<&'static AtomicUsize> {
    FREE_SEEN.get(index as usize)
}

/// How long what a look notes of an arena's free pages stands before a look notes it
/// anew (see [`Kept::see`]), in milliseconds.
const SEEN_FOR_MS: u64 = 1000;

/// A monotonic clock in milliseconds, coarse (a tick or so): read inside the allocator,
/// where nothing may allocate or block.
fn coarse_ms() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid `timespec` to write to. The clock exists on every Linux
    // since 2.6.32; a failed read leaves zero, and the notes then only fall: every
    // arena's free pages count as fresh, and the fullest go first.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    (now.tv_sec as u64) * 1000 + (now.tv_nsec as u64) / 1_000_000
}

/// How many of a set's arenas a look ranks (see [`Ranked`]).
const RANKED: usize = u8::BITS as usize;

/// The arenas of a set that a look gives back first, as it reads them: up to
/// [`RANKED`], those whose free pages are the least fresh first. An arena's fresh pages
/// are those it freed since the last note of what it held (see [`Kept::see`]): work
/// that frees its buffers at the end of a round and makes them again at the start of
/// the next takes them back at once, and giving them back means faulting them in again;
/// the pages an arena held already at the last note are those its work did not take
/// back. Between two arenas with as large a share of fresh pages, the one with fewer
/// (see [`sooner`]). In an array on the stack: a look runs inside the allocator, where
/// nothing may allocate.
#[derive(Default)]
struct Ranked {
    /// (arena, free bytes, fresh bytes), the first to give back first; `len` of them
    /// are set.
    ranked: [(u32, usize, usize); RANKED],
    len: usize,
    /// Which of them were given back: bit `k` for the `k`th.
    given_back: u8,
    /// Every arena of the set was given back.
    all_given_back: bool,
}

/// Whether an arena that holds `a = (free, fresh)` bytes is to be given back before one
/// that holds `b`: the smaller share of fresh pages; between two shares as small, the
/// fewer fresh pages (the cheaper to fault in again); between two with none, the more
/// free pages.
fn sooner(a: (usize, usize), b: (usize, usize)) -> bool {
    // fresh_a / free_a against fresh_b / free_b, without dividing (free is never 0 here).
    let (left, right) = (a.1 as u128 * b.0 as u128, b.1 as u128 * a.0 as u128);
    left < right || (left == right && (a.1 < b.1 || (a.1 == b.1 && a.0 > b.0)))
}

impl Ranked {
    /// Ranks arena `index`, which holds `free` bytes in free pages, `fresh` of them
    /// freed since the last note.
    fn note(&mut self, index: u32, free: usize, fresh: usize) {
        if free == 0 {
            return;
        }
        let at =
            self.ranked[..self.len].partition_point(|&(_, f, n)| !sooner((free, fresh), (f, n)));
        if at == RANKED {
            return;
        }
        let end = self.len.min(RANKED - 1);
        self.ranked.copy_within(at..end, at + 1);
        self.ranked[at] = (index, free, fresh);
        self.len = end + 1;
    }

    /// Gives back the ranked arenas' free pages, in their order, until what the set
    /// holds free (`free` bytes, as read) is at most `bound`, and returns what it then
    /// holds by the same reading.
    fn give_back_above(&mut self, mut free: usize, bound: usize) -> usize {
        for (k, &(index, held, _)) in self.ranked[..self.len].iter().enumerate() {
            if free <= bound {
                break;
            }
            if purge::purge(index).is_ok() {
                free = free.saturating_sub(held);
                self.given_back |= 1 << k;
            }
        }
        free
    }

    /// Whether this look gave arena `index` back.
    fn was_given_back(&self, index: u32) -> bool {
        self.all_given_back
            || self.ranked[..self.len]
                .iter()
                .enumerate()
                .any(|(k, &(i, _, _))| i == index && self.given_back & (1 << k) != 0)
    }
}

/// The phase arenas' frees while a phase is open.
static PHASE: Kept = Kept::new(0, bound);

/// The frees into the arenas that serve blocks outside phases.
static OUTSIDE: Kept = Kept::new(1, bound_outside);

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

    fn ranked(ranked: &Ranked) -> Vec<u32> {
        ranked.ranked[..ranked.len]
            .iter()
            .map(|&(index, _, _)| index)
            .collect()
    }

    /// The arenas with the least share of fresh pages first; between two shares as
    /// small, the fewer fresh pages, and between two with none, the fuller; none with
    /// nothing free; once [`RANKED`] are ranked, one given back sooner takes the place
    /// of the last.
    #[test]
    fn arenas_with_the_least_fresh_pages_are_ranked_first() {
        let mut order = Ranked::default();
        // (arena, free, fresh) in MiB: the forest's two threads as one of them ends a
        // tree: arena 1 just freed its arrays, arena 2 holds what it held a second ago.
        for (index, free, fresh) in [(1, 117, 54), (2, 33, 0), (3, 0, 0), (4, 40, 40), (5, 66, 0)] {
            order.note(index, free * MIB, fresh * MIB);
        }
        assert_eq!(ranked(&order), [5, 2, 1, 4]);
        for index in 10..20u32 {
            order.note(index, index as usize * MIB, 0);
        }
        let stale: Vec<u32> = [5, 2].into_iter().chain((14..20u32).rev()).collect();
        assert_eq!(ranked(&order), stale);
        order.note(30, 100 * MIB, MIB); // a little fresh: after every stale one
        assert_eq!(ranked(&order), stale);

        // Both all fresh: one thread freed its arrays just now, the other 33 MiB since
        // its arena was given back. The 33 MiB first: fewer pages to fault in again.
        let mut order = Ranked::default();
        order.note(11, 106 * MIB, 106 * MIB);
        order.note(12, 33 * MIB, 33 * MIB);
        assert_eq!(ranked(&order), [12, 11]);
    }

    /// Arenas are given back in their order, and no more of them once the rest is
    /// under the bound; the look knows which. (Arena 0, jemalloc's first, stands for
    /// each: a purge of it gives back what it holds free, which nothing here needs.)
    #[test]
    fn arenas_are_given_back_until_the_rest_is_under_the_bound() {
        let given_back = |bound: usize| {
            let mut order = Ranked::default();
            for free in [40, 30, 20, 10] {
                order.note(0, free * MIB, 0);
            }
            let left = order.give_back_above(100 * MIB, bound * MIB) / MIB;
            (left, order.given_back)
        };
        assert_eq!(given_back(50), (30, 0b11));
        assert_eq!(given_back(100), (100, 0));
        assert_eq!(given_back(0), (0, 0b1111));
        assert_eq!(
            Ranked::default().give_back_above(100 * MIB, 50 * MIB),
            100 * MIB
        );
    }

    /// An arena given back is known as such, and no other but when all were.
    #[test]
    fn a_look_knows_the_arenas_it_gave_back() {
        let mut order = Ranked::default();
        order.note(7, 10 * MIB, 0);
        order.note(8, 5 * MIB, 0);
        order.given_back = 0b1;
        assert!(order.was_given_back(7));
        assert!(!order.was_given_back(8));
        order.all_given_back = true;
        assert!(order.was_given_back(8));
    }

    /// A thread's frees reach the set's count a MiB at a time, or at once for a larger
    /// block; each set's apart. On a thread of its own, which frees nothing else into
    /// the sets meanwhile.
    #[test]
    fn a_thread_counts_its_frees_a_mib_at_a_time() {
        fn none() -> std::iter::Empty<u32> {
            std::iter::empty()
        }
        std::thread::spawn(|| {
            let (a, b) = (Kept::new(0, bound), Kept::new(1, bound_outside));
            let counted = |kept: &Kept| kept.freed.load(Ordering::Relaxed);
            for _ in 0..3 {
                a.freed(COUNT_EVERY / 4, none);
            }
            b.freed(COUNT_EVERY / 2, none);
            assert_eq!((counted(&a), counted(&b)), (0, 0));
            a.freed(COUNT_EVERY / 4, none);
            assert_eq!((counted(&a), counted(&b)), (COUNT_EVERY, 0));
            b.freed(2 * MIB, none);
            assert_eq!(counted(&b), COUNT_EVERY / 2 + 2 * MIB);
            // Below the first look (`LOOK_EVERY`): nothing was looked at or reset.
            assert!(counted(&a) + counted(&b) < LOOK_EVERY);
        })
        .join()
        .expect("the counting thread");
    }
}
