//! The decay policy of this crate's arenas: when they keep the pages freed in them for
//! reuse (dirty decay -1, while work runs) and when they give them back (decay 0: every
//! free page at the end of the work, then each page the moment it is freed), and arenas
//! that stand by between the two.
//!
//! An arena's end of work ([`return_freed`]) notes in its entry of
//! [`crate::mechanism::table`] its count of active pages before and after its purge,
//! and the calls of its extent hooks so far. When work starts again ([`keep_freed`]),
//! decay -1 first, a purge of jemalloc's can be under way only if something was freed
//! into the arena meanwhile (the count moved), or one ran (the hooks were called); only
//! then does the start wait for it ([`purge::until_a_purge_runs`]).
//!
//! The end waits the same way if its own purge called no hook on its thread (nothing
//! was free, or jemalloc skipped the purge for one of its own under way), unless
//! nothing the end could give back reached the arena since the start: its count of
//! active pages, the calls of its hooks that give pages back, and the extents its
//! hooks made ([`hooks::carved`]) are where the start left them ([`note_start`]).
//! Pages become free only as the count drops; for it to come back, extents must be
//! handed out again, and one not cut or mapped by a hook is a free extent taken whole,
//! which takes free pages away with it. (Only one taken whole from the pages the arena
//! gave back earlier would slip through: then the pages freed meanwhile wait for the
//! arena's next purge, and only if one of jemalloc's was under way throughout.) A
//! scope that allocates from its thread's cache, or frees nothing, ends without a wait.
//! An arena that stood by (below) noted no start: its end waits as before.
//!
//! Arenas that stand by go on giving freed pages back at once (dirty decay 0)
//! until a thread bound to them allocates a large block, and only then keep freed pages
//! for reuse (decay -1).
//!
//! A pool of 128 workers whose job is 8 small tasks uses a few of its arenas; setting
//! every arena's decay at each job's start and end costs two control calls per arena
//! (each resets the arena's decay state) whether its worker did anything or not. An
//! arena that stands by instead costs nothing at the start; its worker's first block of
//! [`crate::work::route::FLOOR`] bytes or more (the allocator's out-of-line path)
//! switches it to keeping freed pages, before that block is allocated; and the end
//! makes no control call for it if nothing happened in it (see
//! [`return_freed_if_used`]).
//!
//! Work that allocates only small blocks in an arena that stands by would run with its
//! freed pages given back at once: slabs that empty are purged as they empty, which
//! for work that frees small objects on other threads costs several times the job's
//! time. So the first purge of such an arena also switches it: the extent hooks, which
//! see every purge, mark the arena ([`table::mark_if_standing_by`]) and wake a thread of this
//! module's, started with the first arena that stands by (again in a child made by
//! `fork`, which has none of its parent's threads), which switches it from outside
//! jemalloc (a hook runs inside jemalloc, with its locks held, where no control
//! call may be made). The work pays for the purges made before that thread runs.
//!
//! The switch (on a worker or on that thread) and the end race only through `clear`:
//! whichever clears the flag first wins, and the switch holds the arena's purge lock
//! while it sets the decay, so an end that lost waits for it and then gives the pages
//! back.

#[cfg(test)]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicU8, Ordering};
use std::thread;

use crate::mechanism::ctl::{self, CtlResult, Pages};
use crate::mechanism::{fork, hooks, table};
use crate::policy::purge;

/// Sets arena `index` (one of this crate's) to keep the pages freed in it until it is
/// purged (dirty decay -1), first waiting, if something may have started a purge of
/// jemalloc's in it since its last work ended, for that purge to end.
pub(crate) fn keep_freed(index: u32) -> CtlResult<()> {
    let _locked = purge::lock(index);
    clear(index);
    keep_freed_locked(index)
}

/// [`keep_freed`], with the arena's purge lock held by the caller.
fn keep_freed_locked(index: u32) -> CtlResult<()> {
    purge::counted(index, ctl::arena_set_decay(index, Pages::Dirty, -1))?;
    let last = table::arena(index);
    last.idle.store(false, Ordering::SeqCst);
    if moved(index) {
        // A wait that gave up (a `fork` was waiting) leaves the next start unsure; the
        // end checks for itself.
        let ran = purge::until_a_purge_runs(index)?;
        last.unsure.store(!ran, Ordering::Relaxed);
    }
    note_start(index);
    Ok(())
}

/// Notes arena `index`'s figures as work starts in it (purge lock held, decay -1, any
/// wait for a purge of jemalloc's done), for [`untouched_since_start`].
fn note_start(index: u32) {
    let last = table::arena(index);
    let active = purge::active_pages(index);
    last.active_at_start
        .store(active.unwrap_or(0), Ordering::Relaxed);
    last.give_backs_at_start
        .store(hooks::gave_back(index), Ordering::Relaxed);
    last.carves_at_start
        .store(hooks::carved(index), Ordering::Relaxed);
    last.started_sure.store(
        active.is_some() && !last.unsure.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
}

/// Whether nothing that the end of the work in arena `index` could give back has
/// reached it since the start (see the module docs), `active` being its active pages
/// now; `false` if the start's figures are missing. Takes them: the next work notes its
/// own. Called by the end, purge lock held.
fn untouched_since_start(index: u32, active: Option<usize>) -> bool {
    let last = table::arena(index);
    last.started_sure.swap(false, Ordering::Relaxed)
        && active == Some(last.active_at_start.load(Ordering::Relaxed))
        && hooks::gave_back(index) == last.give_backs_at_start.load(Ordering::Relaxed)
        && hooks::carved(index) == last.carves_at_start.load(Ordering::Relaxed)
}

/// Whether anything may have happened in arena `index` since its last work ended: a
/// free into it (its count of active pages moved), a purge (its hooks were called), or
/// an end whose figures were unsure. `false` before its first end.
fn moved(index: u32) -> bool {
    let last = table::arena(index);
    last.ended.load(Ordering::Relaxed)
        && (last.unsure.load(Ordering::Relaxed)
            || purge::active_pages(index) != Some(last.active_at_end.load(Ordering::Relaxed))
            || hooks::gave_back(index) != last.give_backs_at_end.load(Ordering::Relaxed))
}

/// Makes arena `index` stand by (see the module docs) if it is idle; if it keeps
/// freed pages already, it goes on keeping them. Where no arena can stand by (the
/// thread that switches them could not be started), keeps its freed pages now.
pub(crate) fn keep_freed_on_use(index: u32) -> CtlResult<()> {
    if !table::arena(index).idle.load(Ordering::SeqCst) || stand_by(index) {
        return Ok(());
    }
    keep_freed(index)
}

/// Ends work in arena `index` as [`return_freed`] does, unless the arena stood by (see
/// the module docs) from its last end until now, and nothing happened in it
/// meanwhile: then there is nothing to give back, and no control call is made. Returns
/// whether the arena was used since its last end: something was allocated from it or
/// freed into it that moved its count of active pages, or a purge ran in it.
pub(crate) fn return_freed_if_used(index: u32) -> CtlResult<bool> {
    let stood_by = clear(index);
    let used = moved(index);
    if stood_by && !used {
        return Ok(false);
    }
    return_freed(index).map(|()| used)
}

/// Gives every free page of arena `index` (one of this crate's) back, and from then on
/// each page freed in it at once (dirty decay 0).
pub(crate) fn return_freed(index: u32) -> CtlResult<()> {
    let _locked = purge::lock(index);
    clear(index);
    let last = table::arena(index);
    // Before decay 0: a free that jemalloc lets skip its purge from now on is one that
    // `purge::free` sees through.
    last.idle.store(true, Ordering::SeqCst);
    let before = purge::active_pages(index);
    let untouched = untouched_since_start(index, before);
    let here = hooks::gave_back_here();
    let mut set = purge::counted(index, ctl::arena_set_decay(index, Pages::Dirty, 0));
    let mut gave_up = false;
    if set.is_ok() && hooks::gave_back_here() == here && !untouched {
        // The decay change gave nothing back on this thread: nothing was free, or
        // jemalloc skipped its purge because one of its own was under way, begun
        // inside a free on another thread while the arena waited for work (the free
        // counted before the last end's figures, its purge begun after them, so the
        // start did not wait for it). That purge covers only the pages free when it
        // began, none of the work's: wait for it to end, and purge.
        // A wait that gave up (a `fork` was waiting) leaves the pages for the next
        // purge, and the next start waits.
        set = purge::until_a_purge_runs(index).map(|ran| gave_up = !ran);
    }
    let after = purge::active_pages(index);
    last.active_at_end
        .store(after.unwrap_or(0), Ordering::Relaxed);
    last.give_backs_at_end
        .store(hooks::gave_back(index), Ordering::Relaxed);
    last.unsure.store(
        before.is_none() || before != after || set.is_err() || gave_up,
        Ordering::Relaxed,
    );
    last.ended.store(true, Ordering::Relaxed);
    set
}

/// How long the arenas for blocks outside phases keep a freed page before they give it
/// back, in milliseconds: jemalloc's default for its own arenas, set by this crate
/// whatever `_RJEM_MALLOC_CONF` says.
pub(crate) const OUTSIDE_DECAY_MS: isize = 10_000;

/// Sets arena `index` (one of this crate's, for blocks outside phases and scopes) to
/// keep freed pages as jemalloc's own arenas keep them, without jemalloc's two ways of
/// giving a large block back the moment it is freed: it keeps a freed page for reuse
/// over [`OUTSIDE_DECAY_MS`], whatever its size (its oversize threshold is never
/// reached: jemalloc would otherwise purge, inside the free, every free extent of 8 MiB
/// and more, and a buffer reused in a loop would be faulted in again at every use).
/// What it keeps goes back when the process goes idle (see [`crate::policy::idle`]),
/// at the next phase's end, or by [`trim`](crate::trim).
pub(crate) fn keep_as_outside(index: u32) -> CtlResult<()> {
    let _locked = purge::lock(index);
    // jemalloc purges it on its own from now on: no start's figures hold.
    table::arena(index)
        .started_sure
        .store(false, Ordering::Relaxed);
    ctl::arena_set_oversize_threshold(index, usize::MAX)?;
    ctl::arena_set_decay(index, Pages::Dirty, OUTSIDE_DECAY_MS)
}

/// Where the start of the switcher's thread stands in this process: one of the four
/// below. A child made by `fork` has none of its parent's threads, so it starts again
/// from [`NOT_STARTED`] (see [`after_fork_in_child`]).
static SWITCHER_STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
const FAILED: u8 = 3;

/// Makes arena `index`, idle (decay 0), stand by; returns `false`, and changes nothing,
/// if the switcher's thread is not running and cannot be started now (it failed to
/// start, or another thread is starting it): the caller then keeps the arena's freed
/// pages at once instead.
pub(crate) fn stand_by(index: u32) -> bool {
    let running = match SWITCHER_STATE.load(Ordering::Acquire) {
        RUNNING => true,
        NOT_STARTED => start_switcher(),
        _ => false,
    };
    if running {
        table::arena(index)
            .standing_by
            .store(true, Ordering::Release);
    }
    running
}

/// Starts the switcher's thread, unless another thread is already starting it; returns
/// whether it runs. No lock: a `fork` while another thread starts it leaves the child
/// nothing to wait for.
#[cold]
fn start_switcher() -> bool {
    if SWITCHER_STATE
        .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return SWITCHER_STATE.load(Ordering::Acquire) == RUNNING;
    }
    // Only stores to atomics: what a child of a multithreaded process may do.
    fork::on_child(after_fork_in_child);
    let spawned = thread::Builder::new()
        .name("arenapool-standby".into())
        .spawn(run_switcher);
    match spawned {
        Ok(handle) => {
            table::hang_bell(Some(handle.thread().clone()));
            // A hook that marked an arena before that store saw no thread to wake (in a
            // child, an arena may stand by before its switcher runs); this wake-up
            // makes the thread look at the marks once more after the store. With both
            // sides sequentially consistent, either the hook sees the thread or this
            // look sees the mark.
            handle.thread().unpark();
            SWITCHER_STATE.store(RUNNING, Ordering::Release);
            true
        }
        Err(_) => {
            SWITCHER_STATE.store(FAILED, Ordering::Release);
            false
        }
    }
}

/// Runs in the child of every `fork` (see [`crate::mechanism::fork`]): the switcher's
/// thread is the parent's, so the child's next arena to stand by starts its own. The
/// parent's handle stays allocated in the child, unused. Arenas marked for a switch
/// stay marked; the new thread switches them when it is first woken.
fn after_fork_in_child() {
    table::hang_bell(None);
    SWITCHER_STATE.store(NOT_STARTED, Ordering::Relaxed);
}

/// The switcher's thread: switches every arena marked, then waits to be woken by the
/// hooks ([`table::mark_if_standing_by`]; or by its start, see [`start_switcher`]) and
/// does it again.
fn run_switcher() {
    loop {
        for word in 0..table::MARK_WORDS {
            let mut marked = table::take_marks(word);
            while marked != 0 {
                let index = (word * 64) as u32 + marked.trailing_zeros();
                marked &= marked - 1;
                switch_to_keeping(index);
            }
        }
        thread::park();
    }
}

/// Ends arena `index`'s standing by; returns whether it stood by. The flag's one
/// read-modify-write decides between an end and a switch that race.
fn clear(index: u32) -> bool {
    let flag = &table::arena(index).standing_by;
    flag.load(Ordering::Acquire) && flag.swap(false, Ordering::AcqRel)
}

/// Called by the allocator before a thread bound to arena `index` allocates a block of
/// [`crate::work::route::FLOOR`] bytes or more: if the arena stands by, it keeps freed
/// pages from now on. One load.
#[inline]
pub(crate) fn before_large_alloc(index: u32) {
    if table::get(index).is_some_and(|state| state.standing_by.load(Ordering::Relaxed)) {
        switch_to_keeping(index);
    }
}

/// Switches arena `index` to keeping freed pages if it still stands by.
#[cold]
#[inline(never)]
fn switch_to_keeping(index: u32) {
    let _locked = purge::lock(index);
    if clear(index) {
        // Cannot fail for an arena that exists; if it did, the arena would go on giving
        // freed pages back at once: slower, still right. Nothing may unwind from here.
        let _ = keep_freed_locked(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::tally;
    use crate::work::recycler;
    use std::sync::Mutex;
    use tikv_jemalloc_sys as ffi;

    const SCRATCH: usize = 3 << 20;

    /// A block of `size` bytes in arena `index`, written.
    fn block_in(index: u32, size: usize) -> usize {
        let flags = ffi::MALLOCX_ARENA(index as usize) | ffi::MALLOCX_TCACHE_NONE;
        // SAFETY: a non-zero size and flags naming an existing arena.
        let block = unsafe { ffi::mallocx(size, flags) };
        assert!(!block.is_null());
        // SAFETY: the block was just allocated with `size` bytes.
        unsafe { std::ptr::write_bytes(block.cast::<u8>(), 1, size) };
        block as usize
    }

    fn free(block: usize, size: usize) {
        // SAFETY: `block` was allocated by `block_in` with `size`, and is freed once.
        unsafe { ffi::sdallocx(block as *mut _, size, ffi::MALLOCX_TCACHE_NONE) };
    }

    /// The end of work gives back what the work freed while a purge of jemalloc's,
    /// begun inside the free of an earlier result on another thread while the arena
    /// waited for work, is still under way (that thread descheduled midway: here held
    /// in the hook), and the start did not wait for it (the free was counted before
    /// the last end's figures). jemalloc skips the purge of the end's decay change
    /// then; the end waits for the other purge and purges.
    #[test]
    fn an_end_gives_back_while_a_purge_of_jemallocs_is_under_way() {
        end_while_a_purge_of_jemallocs_is_under_way(false);
    }

    /// The same when the work's scratch was allocated before the work started (data
    /// that a former piece of work left in the arena, freed by this one): the free
    /// moves the arena's count of active pages, though no hook made an extent.
    #[test]
    fn an_end_gives_back_data_from_before_its_start_while_a_purge_is_under_way() {
        end_while_a_purge_of_jemallocs_is_under_way(true);
    }

    /// A new arena, whose counter of active pages is found, after a piece of work
    /// that left a result of 1 MiB in it (returned with the arena's index).
    fn arena_after_a_result() -> (u32, usize) {
        let index = recycler::create_arena(false).unwrap();
        while purge::active_pages(index).is_none() {
            ctl::refresh_stats().unwrap();
        }
        keep_freed(index).unwrap();
        let result = block_in(index, 1 << 20);
        return_freed(index).unwrap();
        (index, result)
    }

    /// The end of work that freed nothing into its arena makes no wait: the wait's
    /// marker, freed and purged, would call a hook that gives pages back.
    #[test]
    fn an_end_after_nothing_freed_does_not_wait() {
        let (index, result) = arena_after_a_result();
        keep_freed(index).unwrap();
        let calls = hooks::gave_back(index);
        return_freed(index).unwrap();
        assert_eq!(
            hooks::gave_back(index),
            calls,
            "the end of work that freed nothing purged"
        );
        free(result, 1 << 20);
    }

    /// See [`an_end_gives_back_while_a_purge_of_jemallocs_is_under_way`]; the scratch
    /// is allocated before the work starts if `scratch_before_start`.
    fn end_while_a_purge_of_jemallocs_is_under_way(scratch_before_start: bool) {
        // One hold at a time.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let (index, result) = arena_after_a_result();

        // The result is freed on another thread, into the idle arena: jemalloc purges
        // it there, and that purge is held in the hook.
        let waits = tally::purge_waits();
        static WAITS: AtomicU64 = AtomicU64::new(0);
        WAITS.store(waits, Ordering::SeqCst);
        hooks::hold::hold(index, || {
            tally::purge_waits() > WAITS.load(Ordering::SeqCst)
        });
        let freer = thread::spawn(move || free(result, 1 << 20));
        while !hooks::hold::reached() {
            thread::yield_now();
        }
        // Allocated now, it is counted in the last end's figures below.
        let early = scratch_before_start.then(|| block_in(index, SCRATCH));
        // The figures of the last end, as if the free had been counted before them.
        let last = table::arena(index);
        last.active_at_end
            .store(purge::active_pages(index).unwrap(), Ordering::Relaxed);
        last.give_backs_at_end
            .store(hooks::gave_back(index), Ordering::Relaxed);
        last.unsure.store(false, Ordering::Relaxed);

        // Work: scratch freed inside, then the end.
        keep_freed(index).unwrap();
        let scratch = early.unwrap_or_else(|| block_in(index, SCRATCH));
        free(scratch, SCRATCH);
        let before = hooks::bytes_given_back(index);
        return_freed(index).unwrap();
        let given_back = hooks::bytes_given_back(index) - before;
        hooks::hold::release();
        freer.join().unwrap();
        assert!(
            given_back >= SCRATCH as u64,
            "the end gave back {given_back} bytes of {SCRATCH} freed"
        );
    }
}
