//! `Arena`: a recycled jemalloc arena that threads can be bound to and that can be purged.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::error::Error;
use crate::mechanism::table::{self, Use};
use crate::mechanism::{ctl, hooks};
use crate::policy::purge;
use crate::work::binding::Binding;
use crate::work::install::ensure_bindable;
use crate::work::recycler::{self, Decay, Slot};

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
    /// Taken out only by `Drop`.
    slot: ManuallyDrop<Slot>,
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
    /// - No memory is left for a new arena's metadata ([`Error::is_out_of_memory`]).
    /// - jemalloc runs with `process_madvise_max_batch` above 0
    ///   ([`Error::is_process_madvise`]), whose purges would bypass the arenas' hooks.
    pub fn new() -> Result<Arena, Error> {
        Arena::with_huge_pages(crate::mechanism::huge::default_setting())
    }

    /// Like [`Arena::new`], with huge pages or without, whatever
    /// [`set_huge_pages`](crate::set_huge_pages) says.
    ///
    /// An arena with huge pages has its memory advised `MADV_HUGEPAGE`, so the kernel
    /// faults it in 2 MiB at a time where it can (a fraction of the cost per byte of
    /// 4 KiB pages), and a purge gives back whole 2 MiB pages where they are free, so
    /// that they come back as huge pages. A purge still gives back every free page; a
    /// huge page that holds live data is resident in full until a purge finds its free
    /// part. Where the kernel's transparent huge pages are `never` or not supported,
    /// both kinds behave alike.
    ///
    /// # Errors
    ///
    /// As [`Arena::new`].
    pub fn with_huge_pages(huge: bool) -> Result<Arena, Error> {
        ensure_bindable()?;
        crate::policy::idle::start();
        Arena::acquired(huge)
    }

    /// A scope's arena: [`Arena::new`], but for the idle return's thread, which the
    /// scope's end starts once the large path has been used (see
    /// [`idle::start_once_used`](crate::policy::idle::start_once_used)).
    pub(crate) fn for_scope() -> Result<Arena, Error> {
        ensure_bindable()?;
        Arena::acquired(crate::mechanism::huge::default_setting())
    }

    fn acquired(huge: bool) -> Result<Arena, Error> {
        Ok(Arena {
            slot: ManuallyDrop::new(recycler::acquire(huge)?),
        })
    }

    /// jemalloc's index of this arena (as in `arena.<i>.*` controls).
    pub fn index(&self) -> u32 {
        self.slot.index()
    }

    /// Counts this arena among the arenas of thread pools' workers
    /// ([`Stats::pool`](crate::Stats)) until it is dropped, rather than among scopes'.
    /// `ArenaPool` marks its workers' arenas; a thread pool of one's own marks its own.
    pub fn mark_pool_worker(&self) {
        table::arena(self.index()).set_serves(Use::Pool);
    }

    /// Whether this arena's memory uses huge pages: asked for
    /// ([`Arena::with_huge_pages`]), and allowed by the kernel.
    pub fn huge_pages(&self) -> bool {
        self.slot.huge_pages()
    }

    /// Runs `f` with the calling thread's allocations coming from this arena, then
    /// restores the thread's previous arena, also if `f` panics.
    ///
    /// On the way out the thread's cache is flushed (if the thread freed anything while
    /// bound), so small objects freed inside go back to the arena, where a purge can
    /// return their pages. On the way in it is not: a few small allocations
    /// inside may be served from objects the thread cached earlier, from its previous
    /// arena. Nesting is allowed; the innermost binding wins.
    ///
    /// # Warning: other threads
    ///
    /// Only the calling thread is bound. Work that `f` hands to other threads (a rayon
    /// pool, spawned threads) allocates from *their* arenas. To run parallel work in
    /// arenas, use `arenapool::ArenaPool`, whose workers allocate only from the pool's
    /// own arenas, or a [`phase`](crate::phase), whose arenas take the large blocks of
    /// every thread.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _binding = self.bind();
        f()
    }

    /// Binds the calling thread to this arena until the returned guard is dropped.
    ///
    /// The guard cannot leave the thread (it is `!Send`) and borrows the arena, so the
    /// arena outlives the binding. [`enter`](Arena::enter) is the closure form.
    pub fn bind(&self) -> Binding<'_> {
        Binding::new(self.index(), None)
    }

    /// Like [`bind`](Arena::bind) for an arena shared through an [`Arc`]: the guard keeps
    /// the arena alive and can be stored (in a thread-local, say) across calls. This is
    /// how a thread pool binds each of its workers to an arena for the worker's life.
    pub fn bind_shared(self: &Arc<Self>) -> Binding<'static> {
        Binding::new(self.index(), Some(Arc::clone(self) as Arc<dyn Send + Sync>))
    }

    /// From now on, pages freed in this arena stay with it, for reuse by the work
    /// bound to it, until [`return_freed`](Arena::return_freed) or a
    /// [`purge`](Arena::purge): no `madvise` and no page faults behind the work's back.
    /// [`Arena::new`] hands out arenas in this state.
    ///
    /// # Errors
    ///
    /// A jemalloc control call failed (not expected in practice).
    pub fn retain_freed(&self) -> Result<(), Error> {
        self.slot.set_decay(Decay::Keep)
    }

    /// Gives every unused page of this arena back to the OS now, and from now on each
    /// page freed in it the moment it is freed, on whatever thread frees it: the state
    /// of an arena whose work has ended but whose results may still be alive. Dropping
    /// an `Arena` does this too.
    ///
    /// Objects held in threads' caches are not freed yet in the arena's eyes: see
    /// [`purge`](Arena::purge).
    ///
    /// # Errors
    ///
    /// A jemalloc control call failed (not expected in practice).
    pub fn return_freed(&self) -> Result<(), Error> {
        self.slot.set_decay(Decay::Return)
    }

    /// Like [`retain_freed`](Arena::retain_freed), but only once the arena is used:
    /// until then it goes on giving each freed page back at once, and this call makes
    /// no control call of jemalloc's. For work that may not touch the arena at all, such
    /// as the arenas of a wide pool's workers in a job of a few tasks. End it with
    /// [`return_freed_if_used`](Arena::return_freed_if_used).
    ///
    /// The arena starts keeping freed pages when a thread bound to it allocates a block
    /// of 16 KiB or more (before that block is allocated, on that thread), or when a
    /// purge first runs in it (work that allocates only smaller blocks: its first slab
    /// that empties is given back). The second switch is made by a thread of
    /// arenapool's, `arenapool-standby`, started by the first call of this method, since
    /// jemalloc purges with its locks held; the work pays for the purges made until that
    /// thread runs. A caller that knows the arena will be used calls `retain_freed`.
    ///
    /// If the arena already keeps freed pages, it goes on keeping them. If that thread
    /// cannot be started, this is `retain_freed`.
    ///
    /// # Errors
    ///
    /// A jemalloc control call failed (only where it is `retain_freed`; not expected in
    /// practice).
    pub fn retain_freed_on_use(&self) -> Result<(), Error> {
        self.slot.set_decay(Decay::KeepOnUse)
    }

    /// Like [`return_freed`](Arena::return_freed), but with no control call if the
    /// arena has given freed pages back at once since the last `return_freed` (it was
    /// left to [`retain_freed_on_use`](Arena::retain_freed_on_use) and no large block
    /// was allocated in it) and nothing was freed into it or allocated from it since:
    /// then it has nothing to give back. Returns whether the arena was used: it kept
    /// freed pages, or something happened in it.
    ///
    /// # Errors
    ///
    /// A jemalloc control call failed (not expected in practice).
    pub fn return_freed_if_used(&self) -> Result<bool, Error> {
        self.slot.return_freed_if_used()
    }

    /// Gives this arena's unused pages back to the OS now, and returns how many bytes
    /// that was.
    ///
    /// Flushes the calling thread's cache first. Objects that *other* threads freed
    /// and still hold in their caches keep their pages resident until those threads
    /// flush (their bindings end) or reuse them.
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
        let before = self.returned_total()?;
        ctl::thread_tcache_flush()?;
        purge::purge(self.index())?;
        Ok(self.returned_total()?.saturating_sub(before))
    }

    /// Bytes this arena has given back to the OS since it was created, by purges,
    /// [`return_freed`](Arena::return_freed) and frees while it returns freed pages at
    /// once. The difference of two readings is what was given back in between.
    ///
    /// Counted by the arena's extent hooks as they give pages back: a few loads, with
    /// no refresh of jemalloc's statistics.
    ///
    /// # Errors
    ///
    /// None in practice; the signature leaves room for a control call.
    pub fn returned_total(&self) -> Result<usize, Error> {
        Ok(usize::try_from(hooks::bytes_given_back(self.index())).unwrap_or(usize::MAX))
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once, and `self.slot` is not used after this.
        let slot = unsafe { ManuallyDrop::take(&mut self.slot) };
        recycler::release(slot);
    }
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("index", &self.index())
            .field("huge_pages", &self.huge_pages())
            .finish()
    }
}

/// How many arenas are held by live [`Arena`]s and scopes right now, and by the arena
/// sets kept for the process's life once made: the phase arenas (one per CPU, made by
/// the first [`phase`](crate::phase)) and [`RawAlloc`](crate::RawAlloc)'s (one per CPU,
/// made by its first block outside a phase and a scope).
pub fn live_arenas() -> usize {
    recycler::live()
}
