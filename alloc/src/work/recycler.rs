//! Arenas are created on demand and recycled, never destroyed.
//!
//! jemalloc allows [`ARENA_LIMIT`] arenas per process and each costs metadata, so a
//! program that opens a million scopes must not create a million arenas. A released
//! arena goes on a free list and is handed to the next scope. It may still hold data
//! that escaped its scope, so it is never reset or destroyed.
//!
//! The decay an arena is given as it is checked out and released. Its muzzy decay is
//! 0 for life, set at creation, so every purge is a forced one (RSS drops at once); its
//! dirty decay is:
//! - checked out ([`Decay::Keep`], -1): freed pages stay with the arena for reuse by the
//!   work bound to it, with no purging behind its back (jemalloc would otherwise purge
//!   freed extents of 8 MiB and more at once, and decay the rest over seconds).
//! - released ([`Decay::Return`], 0): setting it gives every free page back at once, and
//!   whatever is freed into the arena later (escaped results) goes back the moment it
//!   is freed. Always set on release, whether or not the arena seems to hold data: a
//!   free on another thread may be landing in the arena at that very moment.
//!
//! Arenas are created here, with the extent hooks of [`crate::mechanism::hooks`], and
//! noted in [`crate::mechanism::table`] as this crate's; every decay change goes
//! through [`crate::policy::decay`] and every purge through [`crate::policy::purge`],
//! so that the purge at the end of an arena's work is not skipped because jemalloc was
//! purging the arena on another thread.
//!
//! The free list is a fixed array inside a static, so recycling never allocates (an
//! allocation here would land in whatever arena the releasing thread is bound to).

use crate::error::Error;
use crate::figures::tally;
use crate::mechanism::ctl::{self, CtlResult, Pages, ARENAS_ALL, ARENA_LIMIT};
use crate::mechanism::fork::{Lock, LockGuard};
use crate::mechanism::hooks;
use crate::mechanism::table::{self, Use};
use crate::policy::{decay, purge};

/// A decay time this crate gives an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decay {
    /// -1: keep freed pages until the next purge.
    Keep,
    /// 0: give free pages back now, and freed pages at once.
    Return,
    /// 0 until a thread bound to the arena allocates a large block, then -1 (see
    /// [`crate::policy::decay`]); the arena is idle (0) or kept (-1) already.
    KeepOnUse,
}

/// Sole ownership of one of this crate's arenas, checked out of the free list: not
/// `Clone` or `Copy`, so an arena is on the free list or in one owner's hands, never
/// both.
#[derive(Debug)]
pub(crate) struct Slot {
    index: u32,
}

impl Slot {
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// Whether the arena has huge pages (asked for, and the kernel allows them).
    pub(crate) fn huge_pages(&self) -> bool {
        table::arena(self.index).has_huge_pages()
    }

    /// Sets the arena's decay time (see the module docs).
    pub(crate) fn set_decay(&self, decay: Decay) -> Result<(), Error> {
        let set = match decay {
            Decay::Keep => decay::keep_freed(self.index),
            Decay::Return => decay::return_freed(self.index),
            Decay::KeepOnUse => decay::keep_freed_on_use(self.index),
        };
        Ok(set?)
    }

    /// Ends the arena's work as [`Decay::Return`] does, unless it has had nothing to
    /// keep since (see [`decay::return_freed_if_used`]); returns whether it was used.
    pub(crate) fn return_freed_if_used(&self) -> Result<bool, Error> {
        Ok(decay::return_freed_if_used(self.index)?)
    }
}

struct FreeList {
    len: usize,
    slots: [Option<Slot>; ARENAS_ALL as usize],
}

static FREE: Lock<FreeList> = Lock::new(FreeList {
    len: 0,
    slots: [const { None }; ARENAS_ALL as usize],
});

fn free_list() -> LockGuard<'static, FreeList> {
    FREE.lock()
}

/// How many arenas are checked out right now.
pub(crate) fn live() -> usize {
    let list = free_list();
    // Counted under the list's lock: an arena being created is checked out already.
    table::created() - list.len
}

/// Takes an arena with huge pages or without (`huge`) off the free list, or creates
/// one; either way with [`Decay::Keep`].
pub(crate) fn acquire(huge: bool) -> Result<Slot, Error> {
    // Where the kernel gives no huge pages, both kinds are the same: one free list.
    let huge = huge && crate::mechanism::huge::available();
    let recycled = {
        let mut list = free_list();
        let len = list.len;
        // The most recently released arena of the kind: the top one, unless a program
        // mixes kinds. Not one inherited by a child made by `fork` whose purges can no
        // longer run (see `table::is_stuck`): it stays on the list, unused.
        match (0..len).rev().find(|&i| {
            list.slots[i]
                .as_ref()
                .is_some_and(|s| s.huge_pages() == huge && !table::is_stuck(s.index))
        }) {
            Some(i) => {
                let slot = list.slots[i].take();
                list.slots.swap(i, len - 1);
                list.len = len - 1;
                slot
            }
            None => None,
        }
    };
    let slot = match recycled {
        Some(slot) => {
            tally::arena_recycled();
            slot
        }
        None => create(huge)?,
    };
    table::arena(slot.index).set_serves(Use::Scope);
    if let Err(e) = slot.set_decay(Decay::Keep) {
        release(slot);
        return Err(e);
    }
    Ok(slot)
}

/// Takes an arena as [`acquire`] does, for the rest of the process: it is never
/// released, and counts as checked out. For the sets of arenas made once per process.
pub(crate) fn acquire_for_life(huge: bool, serves: Use) -> Result<u32, Error> {
    let slot = acquire(huge)?;
    table::arena(slot.index).set_serves(serves);
    Ok(slot.index)
}

fn create(huge: bool) -> Result<Slot, Error> {
    // jemalloc 5.3's `arenas.create` reads past the end of its table of arenas when
    // called with the table full, instead of failing. So the count is checked first,
    // and creations are serialised so no two threads pass the check for the last slot.
    static CREATING: Lock<()> = Lock::new(());
    let index = {
        let _creating = CREATING.lock();
        if ctl::arenas_count()? >= ARENA_LIMIT {
            return Err(Error::arena_limit(live()));
        }
        refuse_process_madvise(ctl::process_madvise_max_batch()?)?;
        create_arena(huge).map_err(|e| {
            if e.is_arena_without_memory() {
                Error::no_memory_for_arena()
            } else {
                Error::from(e)
            }
        })?
    };
    Ok(Slot { index })
}

/// Creates an arena with the hooks of [`crate::mechanism::hooks`], memory from `mmap`
/// only, muzzy decay 0 (every purge a forced one) and huge pages if `huge` (and the
/// kernel allows them), notes it in [`crate::mechanism::table`] as this crate's, and
/// returns its index.
pub(crate) fn create_arena(huge: bool) -> CtlResult<u32> {
    purge::arenas_exist(ctl::tcache_max()? + 1);
    let huge = huge && crate::mechanism::huge::available();
    if huge {
        hooks::huge_arena_created();
    }
    // SAFETY: the table lives in a static for the rest of the process and is never
    // written after it was built.
    let index = unsafe { ctl::arenas_create(hooks::table()?)? };
    // Before anything but jemalloc's metadata is mapped for it (never advised).
    table::note_created(index, huge);
    // Before anything is allocated in it: `merge` relies on it.
    ctl::arena_disable_dss(index)?;
    // Cannot fail for an arena just created; if it did, purges of this arena would
    // only be lazy ones, whose pages the kernel takes back when it needs them.
    let _ = ctl::arena_set_decay(index, Pages::Muzzy, 0);
    Ok(index)
}

/// Refuses to create arenas under jemalloc's `process_madvise_max_batch` above 0:
/// jemalloc then purges arenas whose hooks have no `dalloc` (ours) with
/// `process_madvise`, without calling their hooks, which [`purge`] counts purges with
/// and [`crate::mechanism::huge`] counts committed pages with.
fn refuse_process_madvise(batch: usize) -> Result<(), Error> {
    if batch > 0 {
        Err(Error::process_madvise(batch))
    } else {
        Ok(())
    }
}

/// Gives the arena's free pages back, makes whatever is freed into it later go back at
/// once, and puts it on the free list. Never fails: a control error here only means
/// some pages stay resident until the arena is next released.
pub(crate) fn release(slot: Slot) {
    if slot.set_decay(Decay::Return).is_err() {
        let _ = purge::purge(slot.index);
    }
    table::arena(slot.index).set_serves(Use::Idle);
    let mut list = free_list();
    let top = list.len;
    list.slots[top] = Some(slot);
    list.len += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No arena under `process_madvise_max_batch` above 0, with an error that says so
    /// and what to do. (Setting the option in a jemalloc built without
    /// `process_madvise`, as this one is, makes its own purges undefined behaviour: it
    /// is checked here, not set.)
    #[test]
    fn process_madvise_is_refused() {
        assert!(refuse_process_madvise(0).is_ok());
        let e = refuse_process_madvise(8).unwrap_err();
        assert!(e.is_process_madvise());
        assert!(!e.is_arena_limit() && !e.is_not_installed());
        let message = e.to_string();
        assert!(
            message.contains("process_madvise_max_batch:8") && message.contains("set it to 0"),
            "{message}"
        );
        // This process runs without the option: arenas are made.
        assert_eq!(ctl::process_madvise_max_batch().unwrap(), 0);
        release(acquire(false).expect("an arena"));
    }
}
