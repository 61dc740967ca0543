//! One table of per-arena state: what this crate knows of each arena index, in one
//! place that every floor above reads and writes (the hooks count into it, the purge
//! mechanism and the decay policy keep their marks in it, the recycler notes which
//! arenas are its own).
//!
//! An entry is a set of atomics (and the arena's purge lock), zero for an index no arena
//! of this crate's has: nothing here allocates, so the extent hooks may touch it from
//! inside jemalloc. The stand-by marks and the switcher's doorbell live here too: the
//! hooks mark an arena that stands by when a purge runs in it, and ring for the thread
//! that switches it (see [`crate::policy::decay`]).

use std::ptr;
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::thread::Thread;

use crate::mechanism::ctl::ARENAS_ALL;
use crate::mechanism::fork::{self, Lock};

/// What this crate knows of one arena index.
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct ArenaState {
    // What the arena is.
    /// One of this crate's arenas (created with its hooks).
    ours: AtomicBool,
    /// Its memory has huge pages (asked for, and the kernel allows them); fixed before
    /// its first mapping.
    pub(crate) huge: AtomicBool,
    /// The fork generation it was created in (see [`crate::mechanism::fork`]): in a
    /// child made by `fork` later, the arena is inherited.
    pub(crate) generation: AtomicU32,
    /// What it serves now, a [`Use`]: set by its owner as it changes hands.
    serves: AtomicU8,

    // What its extent hooks counted.
    /// Calls of its hooks that gave pages back (or tried to), on any thread.
    pub(crate) give_backs: AtomicU64,
    /// Bytes those calls gave back (the calls that succeeded).
    pub(crate) bytes_given_back: AtomicU64,
    /// Ranges its hooks failed to give back (the kernel refused).
    pub(crate) give_backs_failed: AtomicU64,
    /// Extents its hooks made: new mappings (`alloc`) and extents cut in two (`split`).
    pub(crate) carves: AtomicU64,

    // The purge mechanism's (see [`crate::policy::purge`]).
    /// Held by every purge and decay change this crate makes to the arena.
    pub(crate) purge_lock: Lock<()>,
    /// Where jemalloc keeps the arena's count of active pages, once looked up.
    pub(crate) active_pages: AtomicPtr<usize>,
    /// Look-ups of that counter that failed.
    pub(crate) failed_look_ups: AtomicU8,
    /// Control calls for the arena that jemalloc refused.
    pub(crate) controls_failed: AtomicU64,
    /// Inherited, and a purge of jemalloc's seemed under way in it for good.
    pub(crate) stuck: AtomicBool,

    // The decay policy's (see [`crate::policy::decay`]): what the last end of work saw.
    /// Work has ended in the arena at least once.
    pub(crate) ended: AtomicBool,
    /// Its active pages when its last work ended, after the purge.
    pub(crate) active_at_end: AtomicUsize,
    /// Its [`give_backs`](ArenaState::give_backs) by then.
    pub(crate) give_backs_at_end: AtomicU64,
    /// The last end's figures could not be trusted: wait for purges at the next start.
    pub(crate) unsure: AtomicBool,
    /// Its active pages, [`give_backs`](ArenaState::give_backs) and
    /// [`carves`](ArenaState::carves) when its work last started, after any wait for a
    /// purge of jemalloc's.
    pub(crate) active_at_start: AtomicUsize,
    pub(crate) give_backs_at_start: AtomicU64,
    pub(crate) carves_at_start: AtomicU64,
    /// Those figures hold for the work under way (taken at its start, none missing, no
    /// wait that gave up); cleared at its end.
    pub(crate) started_sure: AtomicBool,
    /// No work runs in it: its dirty decay is 0.
    pub(crate) idle: AtomicBool,
    /// It stands by: idle until its worker's first large block or first purge.
    pub(crate) standing_by: AtomicBool,
}

impl ArenaState {
    const fn new() -> Self {
        ArenaState {
            ours: AtomicBool::new(false),
            huge: AtomicBool::new(false),
            generation: AtomicU32::new(0),
            serves: AtomicU8::new(Use::Idle as u8),
            give_backs: AtomicU64::new(0),
            bytes_given_back: AtomicU64::new(0),
            give_backs_failed: AtomicU64::new(0),
            carves: AtomicU64::new(0),
            purge_lock: Lock::new(()),
            active_pages: AtomicPtr::new(ptr::null_mut()),
            failed_look_ups: AtomicU8::new(0),
            controls_failed: AtomicU64::new(0),
            stuck: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            active_at_end: AtomicUsize::new(0),
            give_backs_at_end: AtomicU64::new(0),
            active_at_start: AtomicUsize::new(0),
            give_backs_at_start: AtomicU64::new(0),
            carves_at_start: AtomicU64::new(0),
            started_sure: AtomicBool::new(false),
            unsure: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            standing_by: AtomicBool::new(false),
        }
    }

    /// Whether the arena was inherited from the parent process by a child made by
    /// `fork`.
    pub(crate) fn inherited(&self) -> bool {
        self.generation.load(Ordering::Relaxed) != fork::generation()
    }

    /// Whether it has huge pages.
    pub(crate) fn has_huge_pages(&self) -> bool {
        self.huge.load(Ordering::Relaxed)
    }

    /// What it serves now.
    pub(crate) fn serves(&self) -> Use {
        match self.serves.load(Ordering::Relaxed) {
            1 => Use::Scope,
            2 => Use::Pool,
            3 => Use::Phase,
            4 => Use::Raw,
            _ => Use::Idle,
        }
    }

    /// Notes what it serves from now on.
    pub(crate) fn set_serves(&self, serves: Use) {
        self.serves.store(serves as u8, Ordering::Relaxed);
    }
}

/// What one of this crate's arenas serves, for the figures of [`crate::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Use {
    /// On the free list, waiting for reuse.
    Idle = 0,
    /// Checked out: a scope's, or an [`Arena`](crate::Arena) held by hand.
    Scope = 1,
    /// A thread pool's worker's (the pool says so).
    Pool = 2,
    /// A phase arena.
    Phase = 3,
    /// One of [`RawAlloc`](crate::RawAlloc)'s.
    Raw = 4,
}

static TABLE: [ArenaState; ARENAS_ALL as usize] =
    [const { ArenaState::new() }; ARENAS_ALL as usize];

/// How many arenas this crate has created.
static CREATED: AtomicUsize = AtomicUsize::new(0);

/// Arena `index`'s entry, `None` beyond the table (an index jemalloc never gives).
#[inline]
pub(crate) fn get(index: u32) -> Option<&'static ArenaState> {
    TABLE.get(index as usize)
}

/// Arena `index`'s entry, for an index known to be an arena's (below [`ARENAS_ALL`]).
#[inline]
pub(crate) fn arena(index: u32) -> &'static ArenaState {
    &TABLE[index as usize]
}

/// Notes arena `index`, just created with this crate's hooks, as one of this crate's,
/// with huge pages if `huge`, before anything is mapped for it.
pub(crate) fn note_created(index: u32, huge: bool) {
    let Some(state) = get(index) else {
        return;
    };
    state
        .generation
        .store(fork::generation(), Ordering::Relaxed);
    state.huge.store(huge, Ordering::Relaxed);
    state.ours.store(true, Ordering::Release);
    CREATED.fetch_add(1, Ordering::Relaxed);
}

/// How many arenas this crate has created.
pub(crate) fn created() -> usize {
    CREATED.load(Ordering::Relaxed)
}

/// Whether arena `index` is one of this crate's.
#[inline]
pub(crate) fn is_ours(index: u32) -> bool {
    get(index).is_some_and(|state| state.ours.load(Ordering::Acquire))
}

/// This crate's arenas other than `tried` (all of them for `None`), in index order:
/// where a block refused in `tried`, or for which no arena could be made, may still
/// fit, since each arena keeps the address space it has mapped for itself (jemalloc's
/// `retain`).
pub(crate) fn ours_except(tried: Option<u32>) -> impl Iterator<Item = u32> {
    (0..ARENAS_ALL).filter(move |&i| Some(i) != tried && is_ours(i))
}

/// Whether arena `index` is inherited from the parent process and no purge of it can
/// run any more (see [`crate::policy::purge`]).
pub(crate) fn is_stuck(index: u32) -> bool {
    get(index).is_some_and(|state| state.stuck.load(Ordering::Relaxed))
}

/// One bit per arena: a purge ran in it while it stood by, and the switcher's thread is
/// to switch it.
static MARKS: [AtomicU64; ARENAS_ALL as usize / 64] =
    [const { AtomicU64::new(0) }; ARENAS_ALL as usize / 64];

/// The switcher's thread's handle, leaked, once it runs; null before. A load is all a
/// hook needs to wake it.
static BELL: AtomicPtr<Thread> = AtomicPtr::new(ptr::null_mut());

/// Called by the extent hooks of arena `index` when they give pages back: if the arena
/// stands by, marks it and wakes the switcher's thread. A load; for an arena that stands
/// by, an atomic OR and a wake-up (no allocation, no lock: a hook runs inside jemalloc).
pub(crate) fn mark_if_standing_by(index: u32) {
    let stands_by = get(index).is_some_and(|state| state.standing_by.load(Ordering::Relaxed));
    if !stands_by {
        return;
    }
    let bit = 1u64 << (index % 64);
    let before = MARKS[index as usize / 64].fetch_or(bit, Ordering::SeqCst);
    if before & bit == 0 {
        ring();
    }
}

/// Wakes the switcher's thread, if it runs.
pub(crate) fn ring() {
    let switcher = BELL.load(Ordering::SeqCst);
    // SAFETY: a non-null pointer is a leaked `Thread`, never freed.
    if let Some(switcher) = unsafe { switcher.as_ref() } {
        switcher.unpark();
    }
}

/// Hangs the switcher's thread on the doorbell (`None`: takes it down, in a child made
/// by `fork`, which has not the parent's thread). The handle is leaked: a hook may ring
/// at any time, for the rest of the process.
pub(crate) fn hang_bell(thread: Option<Thread>) {
    let handle = thread.map_or(ptr::null_mut(), |thread| Box::into_raw(Box::new(thread)));
    BELL.store(handle, Ordering::SeqCst);
}

/// Takes the marks of the 64 arenas from `64 * word` on, clearing them.
pub(crate) fn take_marks(word: usize) -> u64 {
    MARKS[word].swap(0, Ordering::SeqCst)
}

/// How many words of marks there are.
pub(crate) const MARK_WORDS: usize = ARENAS_ALL as usize / 64;
