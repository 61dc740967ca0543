//! `Arena`: a recycled jemalloc arena that threads can be bound to and that can be purged.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crate::binding::Binding;
use crate::global::ensure_bindable;
use crate::recycler::{self, Slot};
use crate::{ctl, memory, Error, Report};

/// A jemalloc arena that threads can be bound to, and whose free pages can be given
/// back to the OS.
///
/// Arenas are recycled: dropping an `Arena` purges it and returns it to a process-wide
/// free list, from which the next [`Arena::new`] takes it. jemalloc allows 4095 arenas
/// per process, so at most that many (minus jemalloc's own) can be alive at once;
/// creating one per scope and never dropping it is what this type prevents.
///
/// Memory allocated while a thread is bound stays valid after the binding ends, after
/// the arena is dropped and after it is reused: an arena is never reset or destroyed.
/// Such memory is freed at full speed wherever it is dropped, and its pages go back to
/// the OS at once (an arena waiting for reuse with live data has its decay set to 0).
///
/// # Example
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// use arenapool_alloc::Arena;
///
/// let arena = Arena::new()?;
/// let (total, returned) = arena.enter(|| {
///     // 100 scratch blocks of 400 KB, allocated in `arena` and freed
///     let total: u64 = (0..100u64).map(|i| vec![i; 50_000].iter().sum::<u64>()).sum();
///     (total, arena.purge()) // their pages, given back while the work goes on
/// });
/// assert!(returned? >= 400_000);
/// // Leaving `enter` flushed the thread's cache; dropping `arena` purges it again
/// // and puts it back on the free list for the next `Arena::new`.
/// # assert_eq!(total, 4950 * 50_000);
/// # Ok::<(), arenapool_alloc::Error>(())
/// ```
pub struct Arena {
    slot: Slot,
}

impl Arena {
    /// Takes an arena from the free list, or creates one.
    ///
    /// # Errors
    ///
    /// - [`ArenaAlloc`](crate::ArenaAlloc) is not the global allocator
    ///   ([`Error::is_not_installed`]); the message says how to install it.
    /// - jemalloc runs with `percpu_arena`, which makes threads unbindable
    ///   ([`Error::is_percpu_arena`]).
    /// - jemalloc's limit of arenas per process is reached because too many `Arena`s
    ///   are alive at once ([`Error::is_arena_limit`]); dropping some makes room.
    pub fn new() -> Result<Arena, Error> {
        ensure_bindable()?;
        Ok(Arena {
            slot: recycler::acquire()?,
        })
    }

    /// jemalloc's index of this arena (as in `arena.<i>.*` controls).
    pub fn index(&self) -> u32 {
        self.slot.index
    }

    /// Runs `f` with the calling thread's allocations coming from this arena, then
    /// restores the thread's previous arena, also if `f` panics.
    ///
    /// On the way out the thread's cache is flushed (if the thread allocated or freed
    /// anything while bound), so small objects freed inside go back to the arena, where
    /// a purge can return their pages. On the way in it is not: a few small allocations
    /// inside may be served from objects the thread cached earlier, from its previous
    /// arena. Nesting is allowed; the innermost binding wins.
    ///
    /// # Warning: other threads
    ///
    /// Only the calling thread is bound. Work that `f` hands to other threads (a rayon
    /// pool, spawned threads) allocates from *their* arenas. To run parallel work in an
    /// arena, use `arenapool::ArenaPool`, which binds every worker of its pool for the
    /// duration of a job.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _binding = self.bind();
        f()
    }

    /// Binds the calling thread to this arena until the returned guard is dropped.
    ///
    /// The guard cannot leave the thread (it is `!Send`) and borrows the arena, so the
    /// arena outlives the binding. [`enter`](Arena::enter) is the closure form.
    pub fn bind(&self) -> Binding<'_> {
        Binding::new(self.slot.index, None)
    }

    /// Like [`bind`](Arena::bind) for an arena shared through an [`Arc`]: the guard keeps
    /// the arena alive and can be stored (in a thread-local, say) across calls. This is
    /// how a thread pool binds its workers for the duration of a job.
    pub fn bind_shared(self: &Arc<Self>) -> Binding<'static> {
        Binding::new(self.slot.index, Some(Arc::clone(self)))
    }

    /// Gives this arena's unused pages back to the OS now, and returns how many bytes
    /// that was.
    ///
    /// Flushes the calling thread's cache first. Objects that *other* threads freed
    /// and still hold in their caches keep their pages resident until those threads
    /// flush (their bindings end) or reuse them. jemalloc also purges an arena by
    /// itself when the last thread bound to it leaves, so after a scope or job has
    /// ended there is usually nothing left to return here.
    ///
    /// # Warning: what a purge can return
    ///
    /// Only whole free pages: a page that still holds one live object stays resident.
    /// Memory that escaped a scope is never touched; it is returned when it is dropped.
    ///
    /// # Errors
    ///
    /// A jemalloc control call failed (not expected in practice).
    pub fn purge(&self) -> Result<usize, Error> {
        let before = self.returned_so_far()?;
        self.flush_and_purge()?;
        Ok(self.returned_so_far()?.saturating_sub(before))
    }

    /// Flushes the calling thread's cache (objects it holds keep their pages in use),
    /// then returns every unused page of this arena to the OS.
    fn flush_and_purge(&self) -> Result<(), Error> {
        ctl::thread_tcache_flush()?;
        Ok(ctl::arena_purge(self.slot.index)?)
    }

    /// Bytes this arena has given back to the OS since it was created (refreshes
    /// jemalloc's statistics, which costs time in proportion to the number of arenas).
    fn returned_so_far(&self) -> Result<usize, Error> {
        ctl::refresh_stats()?;
        Ok(ctl::arena_purged_bytes(self.slot.index)?)
    }

    /// Runs a piece of work in this arena and reports what it did to memory: calls
    /// `bind` (which binds the threads that will do the work and returns a guard), runs
    /// `run`, then drops the guard and purges this arena.
    ///
    /// [`Report::run_time`] covers `run`; [`Report::purge_time`] covers dropping the
    /// guard (unbinding flushes caches, and jemalloc purges an arena when its last
    /// thread leaves) and the final purge; [`Report::returned`] counts every page the
    /// arena gave back in between. [`with_arena_report`] binds the calling thread; a
    /// thread pool binds its workers.
    ///
    /// If `run` panics, the guard is still dropped (the threads are unbound) and the
    /// panic continues; no report is made.
    ///
    /// [`with_arena_report`]: crate::with_arena_report
    pub fn run_with_report<G, R>(
        &self,
        bind: impl FnOnce() -> G,
        run: impl FnOnce() -> R,
    ) -> (R, Report) {
        let rss_before = memory::rss();
        let returned_before = self.returned_so_far().unwrap_or(0);
        let guard = bind();
        let started = Instant::now();
        let value = run();
        let run_time = started.elapsed();
        let purge_started = Instant::now();
        drop(guard);
        let _ = self.flush_and_purge();
        let purge_time = purge_started.elapsed();
        let returned = self
            .returned_so_far()
            .map_or(0, |now| now.saturating_sub(returned_before));
        let report = Report {
            rss_before,
            rss_after: memory::rss(),
            returned,
            run_time,
            purge_time,
            arena: Some(self.slot.index),
        };
        (value, report)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        recycler::release(self.slot);
    }
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("index", &self.slot.index)
            .finish()
    }
}

/// How many arenas are held by live [`Arena`]s and scopes right now.
pub fn live_arenas() -> usize {
    recycler::live()
}
