//! Arenas are created on demand and recycled, never destroyed.
//!
//! jemalloc allows [`ARENA_LIMIT`] arenas per process and each costs metadata, so a
//! program that opens a million scopes must not create a million arenas. A released
//! arena goes on a free list and is handed to the next scope. It may still hold data
//! that escaped its scope, so it is never reset or destroyed.
//!
//! Decay policy, the arena's only state besides its index:
//! - checked out ([`Decay::Keep`], -1): freed pages stay with the arena for reuse by the
//!   work bound to it, with no purging behind its back (jemalloc would otherwise purge
//!   freed extents of 8 MiB and more at once, and decay the rest over seconds); the
//!   purge at release gives them all back.
//! - released with live data ([`Decay::Return`], 0): whatever is freed into it later
//!   (escaped results) goes back to the OS at once.
//!
//! The free list is a fixed array inside a static, so recycling never allocates (an
//! allocation here would land in whatever arena the releasing thread is bound to).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::ctl::{self, ARENAS_ALL, ARENA_LIMIT};
use crate::Error;

/// The decay time an arena currently has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decay {
    /// -1: keep freed pages until the next purge.
    Keep,
    /// 0: give freed pages back at once.
    Return,
}

impl Decay {
    fn millis(self) -> isize {
        match self {
            Decay::Keep => -1,
            Decay::Return => 0,
        }
    }
}

/// An arena owned by this crate: checked out to one [`Arena`](crate::Arena) at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) index: u32,
    /// jemalloc's counter of the arena's active pages (`None` if it could not be had:
    /// then the arena is assumed to hold live data whenever it is released).
    active_pages: Option<&'static AtomicUsize>,
    decay: Decay,
}

impl Slot {
    fn set_decay(&mut self, decay: Decay) -> Result<(), Error> {
        if self.decay != decay {
            ctl::arena_set_decay(self.index, decay.millis())?;
            self.decay = decay;
        }
        Ok(())
    }

    fn may_hold_data(&self) -> bool {
        self.active_pages
            .is_none_or(|pages| pages.load(Ordering::Relaxed) > 0)
    }
}

struct FreeList {
    len: usize,
    /// Arenas this crate has created in all; `created - len` are checked out.
    created: usize,
    slots: [Option<Slot>; ARENAS_ALL as usize],
}

static FREE: Mutex<FreeList> = Mutex::new(FreeList {
    len: 0,
    created: 0,
    slots: [None; ARENAS_ALL as usize],
});

/// One bit per arena index this crate created: lets [`is_ours`] answer without a lock.
static OURS: [AtomicU64; ARENAS_ALL as usize / 64] =
    [const { AtomicU64::new(0) }; ARENAS_ALL as usize / 64];

fn free_list() -> MutexGuard<'static, FreeList> {
    // Nothing panics while the lock is held; a poisoned list is still consistent.
    FREE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether arena `index` is one of this crate's (a manual arena handed to scopes).
pub(crate) fn is_ours(index: u32) -> bool {
    let i = index as usize;
    i < ARENAS_ALL as usize && OURS[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
}

/// How many arenas are checked out right now.
pub(crate) fn live() -> usize {
    let list = free_list();
    list.created - list.len
}

/// Takes an arena off the free list, or creates one; either way with [`Decay::Keep`].
pub(crate) fn acquire() -> Result<Slot, Error> {
    let recycled = {
        let mut list = free_list();
        match list.len.checked_sub(1) {
            Some(top) => {
                list.len = top;
                list.slots[top].take()
            }
            None => None,
        }
    };
    let mut slot = match recycled {
        Some(slot) => slot,
        None => create()?,
    };
    if let Err(e) = slot.set_decay(Decay::Keep) {
        release(slot);
        return Err(e);
    }
    Ok(slot)
}

/// Arenas with an index below this get a live page counter (see [`create`]).
const COUNTED_ARENAS: u32 = 128;

fn create() -> Result<Slot, Error> {
    // jemalloc 5.3's `arenas.create` reads past the end of its table of arenas when
    // called with the table full, instead of failing. So the count is checked first,
    // and creations are serialised so no two threads pass the check for the last slot.
    static CREATING: Mutex<()> = Mutex::new(());
    let index = {
        let _creating = CREATING.lock().unwrap_or_else(PoisonError::into_inner);
        if ctl::arenas_count()? >= ARENA_LIMIT {
            return Err(Error::arena_limit(live()));
        }
        ctl::arenas_create()?
    };
    // jemalloc's control interface sees a new arena's page counter only after a
    // statistics refresh, which costs time in proportion to the number of arenas.
    // Past a few dozen arenas (thousands of live `Arena`s) that would make creation
    // quadratic, so those arenas go without the counter and are treated as holding
    // data whenever they are released.
    let active_pages = if index < COUNTED_ARENAS {
        ctl::refresh_stats()
            .and_then(|()| ctl::arena_active_pages(index))
            .ok()
    } else {
        None
    };
    let i = index as usize;
    OURS[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
    free_list().created += 1;
    Ok(Slot {
        index,
        active_pages,
        // What `arenas.create` gives a new arena is not -1: `acquire` sets it.
        decay: Decay::Return,
    })
}

/// Gives the arena's free pages back and puts it on the free list. Never fails: a
/// control error here only means some pages stay resident until the arena's next purge.
pub(crate) fn release(mut slot: Slot) {
    if slot.may_hold_data() {
        // Data escaped: when it is freed, give its pages back at once. Set before the
        // purge, so nothing freed in between is kept.
        let _ = slot.set_decay(Decay::Return);
    }
    let _ = ctl::arena_purge(slot.index);
    let mut list = free_list();
    let top = list.len;
    list.slots[top] = Some(slot);
    list.len += 1;
}
