//! Binding every worker of a pool to a job's arena, and undoing it.

use std::cell::RefCell;
use std::sync::Arc;

use arenapool_alloc::{Arena, Binding};
use rayon::ThreadPool;

/// What a worker holds while it is bound to a job's arena.
struct Bound {
    arena: Arc<Arena>,
    /// Dropping it flushes the worker's cache into the arenas its objects came from and
    /// restores the worker's own arena.
    _binding: Binding<'static>,
}

thread_local! {
    /// The job the worker thread is bound to. A worker serves one pool, and a pool runs
    /// one job at a time, so one slot per thread is enough.
    static JOB: RefCell<Option<Bound>> = const { RefCell::new(None) };
}

/// Every worker of a pool allocates from one arena until this guard is dropped.
#[derive(Debug)]
pub(crate) struct WorkerBinding<'p> {
    threads: &'p ThreadPool,
}

impl<'p> WorkerBinding<'p> {
    /// Binds every worker of `threads` to `arena`; returns once all of them are bound.
    pub(crate) fn bind(threads: &'p ThreadPool, arena: &Arc<Arena>) -> Self {
        // The guard exists before any worker is bound, so that whatever happens below,
        // the workers that did bind are unbound again.
        let guard = WorkerBinding { threads };
        threads.broadcast(|_| {
            JOB.with(|job| {
                let mut job = job.borrow_mut();
                debug_assert!(job.is_none(), "a worker is still bound to an earlier job");
                debug_assert!(
                    arenapool_alloc::current_arena().is_none(),
                    "a worker is still bound to one of arenapool's arenas"
                );
                *job = Some(Bound {
                    arena: Arc::clone(arena),
                    _binding: arena.bind_shared(),
                });
            });
        });
        guard
    }
}

impl Drop for WorkerBinding<'_> {
    fn drop(&mut self) {
        self.threads.broadcast(|_| {
            // Taken out first, dropped after the slot's borrow ends.
            let bound = JOB.with(|job| job.borrow_mut().take());
            drop(bound);
        });
    }
}

/// The arena of the job the calling worker is bound to, if it is bound.
pub(crate) fn job_arena() -> Option<Arc<Arena>> {
    JOB.with(|job| job.borrow().as_ref().map(|bound| Arc::clone(&bound.arena)))
}
