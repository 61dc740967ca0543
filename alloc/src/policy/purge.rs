//! Purges of this crate's arenas that are not skipped.
//!
//! jemalloc runs one purge of an arena's freed pages at a time. A purge asked for while
//! another is under way returns at once, having done nothing, and the one under way
//! covers only the pages that were free when it started. Purges of an arena come from
//! two sides:
//! - this crate's own (a scope's or a job's end, [`Arena::purge`](crate::Arena::purge),
//!   [`trim`](crate::trim)). One lock per arena serialises them: a purge waits for the
//!   one under way and then does its own.
//! - jemalloc's, started inside a `free` on whatever thread frees memory into an
//!   arena whose dirty decay is 0: an idle arena, when a result that escaped it is
//!   dropped. No lock of ours covers those, and one may still be running when the arena
//!   is taken again; the end of that work would then give back none of the pages it
//!   freed (seen: 0 B, or 2.0 MiB, of 4.6 MiB).
//!
//! While work runs in an arena its dirty decay is -1, and jemalloc starts no purge of
//! its own. So the work's end is safe if none is under way when the work starts; when
//! one may be (see [`crate::policy::decay`]), the start waits for it to end
//! ([`until_a_purge_runs`]). One that the start cannot see (begun after a free counted
//! before the last end's figures, its thread descheduled midway) is caught at the end:
//! an end whose purge called no hook on its thread waits the same way.
//!
//! Every arena this crate creates has the extent hooks of [`crate::mechanism::hooks`],
//! which count the calls that give pages back, per arena and per thread. Under the
//! arena's lock, the wait frees one small extent into the arena (so that a purge that
//! runs has pages to give back, and calls a hook on this thread) and purges; if no hook
//! was called on this thread, another purge was under way, and yielding and trying
//! again ends when that one does (no new one can start). This also gives back what was
//! freed into the arena while another purge ran, which jemalloc leaves behind.
//!
//! What stays out of reach: a page freed into an idle arena while another purge of that arena runs
//! is left by jemalloc for the arena's next purge; for blocks that reach their arena
//! when freed (those larger than threads' caches hold), [`free`] makes that purge
//! happen at once, but the pages of small objects, whose slabs empty inside jemalloc,
//! wait for the arena's next purge: its next use, or [`trim`](crate::trim).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tikv_jemalloc_sys as ffi;

use crate::figures::tally;
use crate::mechanism::ctl::{self, CtlResult, ARENAS_ALL};
use crate::mechanism::fork::{self, Lock, LockGuard};
use crate::mechanism::{hooks, map, table};

/// Arena `index`'s purge lock (in its entry of [`crate::mechanism::table`]), held by
/// every purge and decay change this crate makes to it.
pub(crate) fn lock(index: u32) -> LockGuard<'static, ()> {
    table::arena(index).purge_lock.lock()
}

/// How long a purge waits for one of jemalloc's to end before giving up (and leaving
/// the pages for the arena's next purge). A purge gives back about 10 GiB a second
/// here; this is far beyond any that could be under way.
const PATIENCE: Duration = Duration::from_secs(10);

/// The same for an arena inherited from the parent process in a child made by `fork`
/// (see [`until_a_purge_runs`]).
const PATIENCE_INHERITED: Duration = Duration::from_millis(50);

/// The smallest size that threads' caches do not hold (`arenas.tcache_max` + 1), once an
/// arena of this crate's exists (before, no block can lie in one).
static UNCACHED_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Called before an arena of this crate's is created: from then on, a block of `from`
/// bytes or more may lie in one, freed straight to its arena.
pub(crate) fn arenas_exist(from: usize) {
    UNCACHED_FROM.store(from, Ordering::Relaxed);
}

/// Arena `index`'s active pages, or `None` if the counter cannot be found yet.
pub(crate) fn active_pages(index: u32) -> Option<usize> {
    let mut count = table::arena(index).active_pages.load(Ordering::Relaxed);
    if count.is_null() {
        count = look_up_active(index)?;
    }
    // SAFETY: a non-null entry is the address jemalloc gave for the arena's counter,
    // valid for the life of the process and only accessed atomically.
    Some(unsafe { AtomicUsize::from_ptr(count) }.load(Ordering::Relaxed))
}

/// How many failed look-ups of its counter an arena waits before it refreshes
/// jemalloc's statistics itself (see [`look_up_active`]).
const LOOK_UPS_BEFORE_REFRESH: u8 = 4;

/// How many arenas this crate had created at the last refresh [`look_up_active`] made.
static CREATED_AT_REFRESH: Lock<usize> = Lock::new(0);

/// jemalloc's control interface finds a new arena's counters only after its
/// statistics were next refreshed, which takes time in proportion to the number of
/// arenas. So a failed look-up refreshes them only once the arenas created since the
/// last such refresh are an eighth of them all (a process that creates thousands of
/// arenas refreshes a few dozen times, not once per arena), or once this arena's
/// look-ups failed [`LOOK_UPS_BEFORE_REFRESH`] times (so that arenas created after the
/// last refresh, too few to make an eighth, find their counters too: a 7-thread pool
/// built after a 64-thread one, say). Until then, the arena's next start waits for
/// purges without looking at the counter.
fn look_up_active(index: u32) -> Option<*mut usize> {
    let count = match ctl::arena_active_pages(index) {
        Ok(count) => count,
        Err(_) => {
            let failed = table::arena(index)
                .failed_look_ups
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            let created = table::created();
            {
                let mut last = CREATED_AT_REFRESH.lock();
                if failed < LOOK_UPS_BEFORE_REFRESH && created < *last + (*last / 8).max(1) {
                    return None;
                }
                *last = created;
            }
            ctl::refresh_stats().ok()?;
            ctl::arena_active_pages(index).ok()?
        }
    };
    let count = count.as_ptr();
    table::arena(index)
        .active_pages
        .store(count, Ordering::Relaxed);
    Some(count)
}

/// Attempts to give arena `index`'s pages back (or to set it to keep or give back
/// freed pages) that failed so far: control calls jemalloc refused, and calls of its
/// extent hooks the kernel refused. Pages a failed attempt left resident go back at
/// the arena's next purge (a control call), or stay until the arena reuses them (a
/// range the kernel refused, which jemalloc keeps without trying again).
pub(crate) fn failures(index: u32) -> u64 {
    let own = table::get(index).map_or(0, |state| state.controls_failed.load(Ordering::Relaxed));
    own.saturating_add(hooks::failed(index))
}

/// `result` of a control call for arena `index`, counted if it failed.
pub(crate) fn counted<T>(index: u32, result: CtlResult<T>) -> CtlResult<T> {
    if result.is_err() {
        if let Some(state) = table::get(index) {
            state.controls_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    result
}

/// Gives every free page of arena `index` back. [`ARENAS_ALL`]: every arena, one after
/// the other.
pub(crate) fn purge(index: u32) -> CtlResult<()> {
    if index != ARENAS_ALL {
        let _locked = lock(index);
        return counted(index, ctl::arena_purge(index));
    }
    // Every arena is tried, whichever fail; the first failure is returned.
    let mut first = Ok(());
    for i in 0..ctl::arenas_count()?.min(ARENAS_ALL) {
        let _locked = lock(i);
        if let Err(e) = counted(i, ctl::arena_purge(i)) {
            first = first.and(Err(e));
        }
    }
    first
}

/// Frees a block with `free_it` (a call into jemalloc), and makes sure its pages go back
/// if it lies in an idle arena of this crate's.
///
/// jemalloc purges an arena whose decay is 0 inside every free into it, on the freeing
/// thread, unless a purge of that arena is under way on another thread: then the free
/// returns at once, and the purge under way covers only the pages that were free when
/// it started. When threads free results into one idle arena at the same time (a
/// phase's results, dropped on a rayon pool's workers), the last of them were seen to
/// stay resident: 20 to 80 MiB of 400 MiB. So a free that called no hook of this
/// thread's, into an idle arena of ours, waits for the purge under way and purges.
/// On the way of every large free, a load and the map's two; for blocks of ours, also a
/// thread-local read before and after; the wait only when jemalloc skipped the free's
/// purge.
///
/// `size` is the block's size if the free goes through the thread's cache (which holds
/// blocks up to `tcache_max`, and gives them to their arena only later), `None` if it
/// goes straight to the arena.
///
/// `free_it` is given the arena of this crate's the block lies in, looked up before it
/// is called (`None` for a block of jemalloc's own arenas, or one a thread's cache
/// takes, which is not looked up); `free` returns the same.
#[inline]
pub(crate) fn free(
    ptr: *mut u8,
    size: Option<usize>,
    free_it: impl FnOnce(Option<u32>),
) -> Option<u32> {
    if size.is_some_and(|size| size < UNCACHED_FROM.load(Ordering::Relaxed)) {
        free_it(None);
        return None;
    }
    // Looked up before the free, which may hand the granule's pages back, but reads
    // only the map: the block's memory is not touched.
    let Some(index) = map::arena_of(ptr as usize) else {
        free_it(None);
        return None;
    };
    let before = hooks::gave_back_here();
    {
        // A purge that jemalloc starts inside this free (into an idle arena) must not
        // be under way when the process forks: jemalloc's note that a purge of the
        // arena is under way is cleared only by the thread that set it, so in the child
        // no purge of the arena would ever run again. The section makes a `fork` wait
        // for the free to end.
        let _section = fork::section();
        free_it(Some(index));
    }
    let idle = table::get(index).is_some_and(|state| state.idle.load(Ordering::SeqCst));
    if hooks::gave_back_here() == before && idle {
        purge_skipped(index);
    }
    Some(index)
}

#[cold]
#[inline(never)]
fn purge_skipped(index: u32) {
    tally::purge_skipped();
    let _locked = lock(index);
    // Work may have taken the arena meanwhile: its end gives the pages back.
    if table::arena(index).idle.load(Ordering::SeqCst) {
        // Cannot fail for an arena that exists; if it did, the pages stay until the
        // arena's next purge.
        let _ = until_a_purge_runs(index);
    }
}

/// Purges arena `index` (lock held by the caller) until a purge is seen to run on this
/// thread: see the module docs. At decay 0, the free of the marker is that purge.
///
/// In a child made by `fork`, a purge of jemalloc's that another thread of the parent
/// had under way in an inherited arena at the fork (one that no section of this
/// crate's covers: the slabs of small objects emptied by a free) stays under way for
/// good, and no purge of that arena runs again. So for an inherited arena the wait is
/// short ([`PATIENCE_INHERITED`]); once it has run out, the arena is taken as stuck
/// ([`table::is_stuck`]): it is purged once each time and never waited for again.
///
/// A `fork` waits for the wait (it runs under the arena's purge lock, inside a
/// section): so the wait gives up as soon as a `fork` is waiting at the gate
/// ([`fork::is_waiting`]), leaving the pages for the arena's next purge, rather than
/// hold the fork for as long as the other purge runs. Returns whether a purge was
/// seen to run (or the arena is stuck and was purged once); `false` when the wait
/// gave up.
pub(crate) fn until_a_purge_runs(index: u32) -> CtlResult<bool> {
    let arena = table::arena(index);
    let inherited = arena.inherited();
    if inherited && arena.stuck.load(Ordering::Relaxed) {
        return counted(index, ctl::arena_purge(index)).map(|()| true);
    }
    let patience = if inherited {
        PATIENCE_INHERITED
    } else {
        PATIENCE
    };
    let size = ctl::large_min()?;
    let flags = ffi::MALLOCX_ARENA(index as usize) | ffi::MALLOCX_TCACHE_NONE;
    let started = Instant::now();
    loop {
        // SAFETY: `size` is non-zero (jemalloc's smallest large size class); `flags`
        // name an existing arena and no thread cache.
        let marker = unsafe { ffi::mallocx(size, flags) };
        if marker.is_null() {
            // Out of memory: nothing to tell a purge that runs from one that does not.
            return counted(index, ctl::arena_purge(index)).map(|()| false);
        }
        // Counted from before the marker's free, which at decay 0 is itself a purge.
        let before = hooks::gave_back_here();
        // SAFETY: `marker` was just allocated with this size, and is freed once, into
        // its own arena (no thread cache): a free extent among the arena's dirty pages.
        unsafe { ffi::sdallocx(marker, size, ffi::MALLOCX_TCACHE_NONE) };
        counted(index, ctl::arena_purge(index))?;
        if hooks::gave_back_here() != before {
            return Ok(true);
        }
        if fork::is_waiting() {
            tally::purge_wait_given_up();
            return Ok(false);
        }
        if started.elapsed() > patience {
            tally::purge_wait_given_up();
            if inherited {
                arena.stuck.store(true, Ordering::Relaxed);
            }
            return Ok(false);
        }
        tally::purge_waited();
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::work::recycler;

    /// A free whose purge jemalloc skipped, into an idle arena, counts as skipped.
    #[test]
    fn skipped_purges_are_counted() {
        let index = recycler::create_arena(false).unwrap();
        crate::policy::decay::return_freed(index).unwrap();
        let before = tally::purges_skipped();
        purge_skipped(index);
        assert_eq!(tally::purges_skipped(), before + 1);
    }

    /// Arenas created after the last refresh, too few to be an eighth of them all, find
    /// their counters within a bounded number of look-ups.
    #[test]
    fn arenas_created_late_find_their_counters() {
        // Many arenas first, and a refresh that covers them: what a 64-thread pool
        // leaves.
        let early: Vec<u32> = (0..64)
            .map(|_| recycler::create_arena(false).unwrap())
            .collect();
        for &index in &early {
            let _ = active_pages(index);
        }
        ctl::refresh_stats().unwrap();
        *CREATED_AT_REFRESH.lock() = table::created().max(64);
        // Then a few more: a 7-thread pool.
        for _ in 0..7 {
            let index = recycler::create_arena(false).unwrap();
            let found = (0..=LOOK_UPS_BEFORE_REFRESH).find(|_| active_pages(index).is_some());
            assert!(
                found.is_some(),
                "arena {index} did not find its counter in {} look-ups",
                LOOK_UPS_BEFORE_REFRESH + 1
            );
        }
    }
}
