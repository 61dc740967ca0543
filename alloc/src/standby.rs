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
//! module's, started with the first arena that stands by, which switches it from
//! outside jemalloc (a hook runs inside jemalloc, with its locks held, where no control
//! call may be made). The work pays for the purges made before that thread runs.
//!
//! The switch (on a worker or on that thread) and the end race only through [`clear`]:
//! whichever clears the flag first wins, and the switch holds the arena's purge lock
//! while it sets the decay, so an end that lost waits for it and then gives the pages
//! back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::{self, Thread};

use crate::ctl::ARENAS_ALL;
use crate::{binding, purge};

/// Per arena: it stands by.
static STANDING_BY: [AtomicBool; ARENAS_ALL as usize] =
    [const { AtomicBool::new(false) }; ARENAS_ALL as usize];

/// One bit per arena: a purge ran in it while it stood by, and the switcher's thread is
/// to switch it.
static PURGED: [AtomicU64; ARENAS_ALL as usize / 64] =
    [const { AtomicU64::new(0) }; ARENAS_ALL as usize / 64];

/// The switcher's thread, once started; `None` if it could not be.
static SWITCHER: OnceLock<Option<Thread>> = OnceLock::new();

/// Makes arena `index`, idle (decay 0), stand by; returns `false`, and changes nothing,
/// if the switcher's thread cannot be started (the caller then keeps the arena's freed
/// pages at once instead).
pub(crate) fn stand_by(index: u32) -> bool {
    if switcher().is_none() {
        return false;
    }
    STANDING_BY[index as usize].store(true, Ordering::Release);
    true
}

fn switcher() -> Option<&'static Thread> {
    SWITCHER
        .get_or_init(|| {
            thread::Builder::new()
                .name("arenapool-standby".into())
                .spawn(run_switcher)
                .ok()
                .map(|handle| handle.thread().clone())
        })
        .as_ref()
}

/// The switcher's thread: waits to be woken by [`purging`], then switches every arena
/// marked.
fn run_switcher() {
    loop {
        thread::park();
        for (word, bits) in PURGED.iter().enumerate() {
            let mut marked = bits.swap(0, Ordering::Acquire);
            while marked != 0 {
                let index = (word * 64) as u32 + marked.trailing_zeros();
                marked &= marked - 1;
                wake(index);
            }
        }
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
    let before = PURGED[arena as usize / 64].fetch_or(bit, Ordering::Release);
    if before & bit == 0 {
        if let Some(Some(switcher)) = SWITCHER.get() {
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
