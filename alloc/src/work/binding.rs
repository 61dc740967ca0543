//! `Binding`: the calling thread allocates from an arena until the guard is dropped.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::mechanism::{ctl, table};

thread_local! {
    static BOUND: Cell<Bound> = const {
        Cell::new(Bound {
            count: 0,
            original: 0,
            current: 0,
        })
    };
}

/// A thread's bindings.
#[derive(Clone, Copy)]
struct Bound {
    /// How many bindings are alive on the thread.
    count: usize,
    /// The arena it had before the first of them: when the last one is dropped, in
    /// whatever order they were dropped, the thread goes back to that arena.
    original: u32,
    /// The arena it allocates from while `count` is above 0.
    current: u32,
}

/// The calling thread allocates from an [`Arena`](crate::Arena) until this guard is dropped.
///
/// Created by [`Arena::bind`](crate::Arena::bind) or [`Arena::bind_shared`](crate::Arena::bind_shared). Dropping it flushes the
/// thread's cache if the thread freed anything while bound (so objects it freed go back
/// to their arenas, where a purge can return their pages), then restores the arena the
/// thread was bound to before. It runs on
/// panic too, so a panic can never leave a thread bound.
///
/// Bindings nest; drop them in the reverse order of their creation (as scopes do). If
/// they are dropped in another order, the thread may allocate from the wrong one of
/// them until the last is dropped; once every binding is gone, the thread is always
/// back on the arena it had before the first.
///
/// # Warning: leaking a binding
///
/// A binding that is never dropped (`mem::forget`, a leaked `Box`) leaves the thread
/// bound: it goes on allocating from the arena after the [`Arena`](crate::Arena) is dropped, and after
/// the arena is handed to the next [`Arena::new`](crate::Arena::new). Nothing becomes invalid (arenas are
/// never reset or destroyed), but that memory then lands in whatever work the arena
/// serves next, and is given back only with it. [`current_arena`] tells whether the
/// calling thread is still bound.
#[must_use = "the thread is unbound as soon as the guard is dropped"]
pub struct Binding<'a> {
    arena: u32,
    /// The arena the thread was bound to before, or `None` if binding failed.
    previous: Option<u32>,
    /// The thread's byte counters (allocated, freed) when it was bound: if it has freed
    /// nothing since, its cache holds nothing it freed and need not be flushed.
    counters: Option<(u64, u64)>,
    /// What keeps the arena alive for a binding that owns it (an `Arc<Arena>`).
    _owner: Option<Arc<dyn Send + Sync>>,
    /// Borrows the arena for `'a`; not `Send`: the binding is the thread's.
    _marker: PhantomData<(&'a (), *const ())>,
}

impl Binding<'_> {
    pub(crate) fn new(arena: u32, owner: Option<Arc<dyn Send + Sync>>) -> Self {
        let previous = ctl::thread_arena_swap(arena).ok();
        if let Some(previous) = previous {
            BOUND.with(|bound| {
                let now = bound.get();
                bound.set(Bound {
                    count: now.count + 1,
                    original: if now.count == 0 {
                        previous
                    } else {
                        now.original
                    },
                    current: arena,
                });
            });
        }
        Binding {
            arena,
            previous,
            counters: ctl::thread_counters().ok(),
            _owner: owner,
            _marker: PhantomData,
        }
    }

    /// Whether the thread was in fact bound. jemalloc refuses a binding only when it
    /// cannot find the arena, which does not happen for an existing [`Arena`](crate::Arena).
    pub fn is_bound(&self) -> bool {
        self.previous.is_some()
    }

    /// The arena the thread is bound to.
    pub fn arena_index(&self) -> u32 {
        self.arena
    }
}

impl Drop for Binding<'_> {
    fn drop(&mut self) {
        // Return everything freed while bound to its arena, then restore. Neither call
        // can fail for an existing arena; if one did, the cost is pages kept resident.
        // A flush costs about a microsecond even when there is nothing in it, so it is
        // made only if the thread freed something while bound. After allocations alone
        // the cache may still hold unused objects it took from this arena in a batch;
        // they are valid, are handed out to the thread's next allocations, and keep at
        // most a page or so of each size class in use meanwhile.
        let freed = match (self.counters, ctl::thread_counters()) {
            (Some((_, before)), Ok((_, now))) => now != before,
            _ => true,
        };
        if freed {
            let _ = ctl::thread_tcache_flush();
        }
        let Some(previous) = self.previous else {
            return;
        };
        let now = BOUND.with(Cell::get);
        let count = now.count.saturating_sub(1);
        let restore = if count == 0 {
            Some(now.original)
        } else if now.current == self.arena {
            Some(previous)
        } else {
            // Dropped out of order: a binding made after this one is still in force.
            None
        };
        BOUND.with(|bound| {
            bound.set(Bound {
                count,
                current: restore.unwrap_or(now.current),
                ..now
            })
        });
        if let Some(index) = restore {
            let _ = ctl::thread_arena_set(index);
        }
    }
}

impl fmt::Debug for Binding<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Binding")
            .field("arena", &self.arena)
            .field("previous", &self.previous)
            .finish()
    }
}

/// Whether the calling thread is bound to one of this crate's arenas (a binding of its
/// is alive). A read of a thread-local, cheap enough for the allocator's large path.
#[inline]
pub(crate) fn is_bound() -> bool {
    BOUND
        .try_with(|bound| bound.get().count > 0)
        .unwrap_or(false)
}

/// The arena the calling thread is bound to, if a binding of its is alive. A read of a
/// thread-local, as [`is_bound`].
#[inline]
pub(crate) fn bound_arena() -> Option<u32> {
    BOUND
        .try_with(|bound| {
            let now = bound.get();
            (now.count > 0).then_some(now.current)
        })
        .ok()
        .flatten()
}

/// The arena index of the calling thread if it is bound to one of this crate's arenas
/// (inside [`with_arena`](crate::with_arena), [`Arena::enter`](crate::Arena::enter) or a pool job), `None`
/// if it allocates from one of jemalloc's automatic arenas.
pub fn current_arena() -> Option<u32> {
    ctl::thread_arena().ok().filter(|&i| table::is_ours(i))
}
