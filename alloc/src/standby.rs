//! Arenas that stand by: they go on giving freed pages back at once (dirty decay 0)
//! until a thread bound to them allocates a large block, and only then keep freed pages
//! for reuse (decay -1).
//!
//! A pool of 128 workers whose job is 8 small tasks uses a few of its arenas; setting
//! every arena's decay at each job's start and end costs two control calls per arena
//! (each resets the arena's decay state) whether its worker did anything or not. An arena
//! that stands by instead costs nothing at the start; its worker's first block of
//! [`crate::phase::FLOOR`] bytes or more (the allocator's out-of-line path) switches it
//! to keeping freed pages, before that block is allocated; and the end makes no control
//! call for it if nothing happened in it (see [`purge::return_freed_if_used`]).
//!
//! Work that allocates only small blocks in an arena that stands by would run with its
//! freed pages given back at once: slabs that empty are purged as they empty, which
//! for work that frees small objects on other threads costs several times the job's
//! time. So the first purge of such an arena also switches it: the extent hooks, which
//! see every purge, mark the arena (see [`purging`]) and wake a thread of this
//! module's, started with the first arena that stands by (again in a child made by
//! `fork`, which has none of its parent's threads), which switches it from outside
//! jemalloc (a hook runs inside jemalloc, with its locks held, where no control
//! call may be made). The work pays for the purges made before that thread runs.
//!
//! The switch (on a worker or on that thread) and the end race only through [`clear`]:
//! whichever clears the flag first wins, and the switch holds the arena's purge lock
//! while it sets the decay, so an end that lost waits for it and then gives the pages
//! back.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::thread::{self, Thread};

use crate::ctl::ARENAS_ALL;
use crate::{binding, fork, purge};

/// Per arena: it stands by.
static STANDING_BY: [AtomicBool; ARENAS_ALL as usize] =
    [const { AtomicBool::new(false) }; ARENAS_ALL as usize];

/// One bit per arena: a purge ran in it while it stood by, and the switcher's thread is
/// to switch it.
static PURGED: [AtomicU64; ARENAS_ALL as usize / 64] =
    [const { AtomicU64::new(0) }; ARENAS_ALL as usize / 64];

/// The switcher's thread's handle, leaked, once it runs; null before. A load is all a
/// hook needs to wake it.
static SWITCHER: AtomicPtr<Thread> = AtomicPtr::new(ptr::null_mut());

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
        STANDING_BY[index as usize].store(true, Ordering::Release);
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
            // Leaked: a hook may wake the thread at any time, for the rest of the
            // process.
            let thread = Box::into_raw(Box::new(handle.thread().clone()));
            SWITCHER.store(thread, Ordering::SeqCst);
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

/// Runs in the child of every `fork` (see [`crate::fork`]): the switcher's thread is the
/// parent's, so the child's next arena to stand by starts its own. The parent's handle
/// stays allocated in the child, unused. Arenas marked for a switch stay marked; the
/// new thread switches them when it is first woken.
fn after_fork_in_child() {
    SWITCHER.store(ptr::null_mut(), Ordering::Relaxed);
    SWITCHER_STATE.store(NOT_STARTED, Ordering::Relaxed);
}

/// The switcher's thread: switches every arena marked, then waits to be woken by
/// [`purging`] (or by its start, see [`start_switcher`]) and does it again.
fn run_switcher() {
    loop {
        for (word, bits) in PURGED.iter().enumerate() {
            let mut marked = bits.swap(0, Ordering::SeqCst);
            while marked != 0 {
                let index = (word * 64) as u32 + marked.trailing_zeros();
                marked &= marked - 1;
                wake(index);
            }
        }
        thread::park();
    }
}

/// Called by the extent hooks of arena `arena` when they give pages back: if the
/// arena stands by, the switcher's thread is to switch it. A load; for an arena that
/// stands by, an atomic OR and a wake-up (no allocation, no lock: a hook runs inside
/// jemalloc).
pub(crate) fn purging(arena: u32) {
    let stands_by = STANDING_BY
        .get(arena as usize)
        .is_some_and(|flag| flag.load(Ordering::Relaxed));
    if !stands_by {
        return;
    }
    let bit = 1u64 << (arena % 64);
    let before = PURGED[arena as usize / 64].fetch_or(bit, Ordering::SeqCst);
    if before & bit == 0 {
        let switcher = SWITCHER.load(Ordering::SeqCst);
        // SAFETY: a non-null pointer is a leaked `Thread`, never freed.
        if let Some(switcher) = unsafe { switcher.as_ref() } {
            switcher.unpark();
        }
    }
}

/// Ends arena `index`'s standing by; returns whether it stood by. The flag's one
/// read-modify-write decides between an end and a switch that race.
pub(crate) fn clear(index: u32) -> bool {
    STANDING_BY
        .get(index as usize)
        .is_some_and(|flag| flag.load(Ordering::Acquire) && flag.swap(false, Ordering::AcqRel))
}

/// Called by the allocator before it allocates a block of [`crate::phase::FLOOR`] bytes
/// or more on the calling thread: if the thread is bound to an arena that stands by,
/// the arena keeps freed pages from now on. A thread-local read, and for a bound
/// thread one load.
#[inline]
pub(crate) fn before_large_alloc() {
    if let Some(index) = binding::bound_arena() {
        if STANDING_BY
            .get(index as usize)
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
        {
            wake(index);
        }
    }
}

/// Switches arena `index` to keeping freed pages if it still stands by.
#[cold]
#[inline(never)]
fn wake(index: u32) {
    let _purging = purge::purging(index);
    if clear(index) {
        // Cannot fail for an arena that exists; if it did, the arena would go on giving
        // freed pages back at once: slower, still right. Nothing may unwind from here.
        let _ = purge::keep_freed_locked(index);
    }
}
