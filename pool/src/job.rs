//! Jobs: how many are running, and what the pool's arenas do with freed pages.
//!
//! While at least one job runs, the pool's arenas keep freed pages for reuse (decay
//! -1): scratch memory is recycled at full speed, with no `madvise` and no page faults.
//! When the last running job ends, they give every free page back to the OS and, until
//! the next job starts, each page freed in them the moment it is freed (decay 0): that
//! is how results dropped between jobs go back at once. Jobs that overlap (several
//! threads calling `run`, or a job inside a job) share the arenas; only the end of the
//! last one gives pages back, so no job has its free pages taken away while it runs.
//!
//! Both transitions are a few control calls per arena, made by the thread that starts
//! or ends the job: no worker is interrupted, and nothing waits for the workers.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arenapool_alloc::Arena;

/// The pool's arenas and the count of running jobs.
pub(crate) struct Jobs {
    arenas: Vec<Arc<Arena>>,
    running: Mutex<usize>,
}

impl Jobs {
    /// Takes the workers' arenas, which start idle: returning freed pages at once.
    pub(crate) fn new(arenas: Vec<Arc<Arena>>) -> Self {
        for arena in &arenas {
            let _ = arena.return_freed();
        }
        Jobs {
            arenas,
            running: Mutex::new(0),
        }
    }

    fn running(&self) -> MutexGuard<'_, usize> {
        // Nothing panics while the lock is held; a poisoned count is still right.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The arenas the pool's workers allocate from.
    pub(crate) fn arenas(&self) -> &[Arc<Arena>] {
        &self.arenas
    }

    /// Starts a job; it ends when the returned guard is dropped, also on panic.
    pub(crate) fn begin(&self) -> Job<'_> {
        let mut running = self.running();
        if *running == 0 {
            // A control call cannot fail for an existing arena; if one did, the job
            // would only run with freed pages going back at once: slower, still right.
            for arena in &self.arenas {
                let _ = arena.retain_freed();
            }
        }
        *running += 1;
        Job { jobs: self }
    }
}

impl fmt::Debug for Jobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jobs")
            .field(
                "arenas",
                &self.arenas.iter().map(|a| a.index()).collect::<Vec<_>>(),
            )
            .field("running", &*self.running())
            .finish()
    }
}

/// A running job. Dropping the last one gives the arenas' free pages back.
#[derive(Debug)]
pub(crate) struct Job<'p> {
    jobs: &'p Jobs,
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        let mut running = self.jobs.running();
        *running -= 1;
        if *running == 0 {
            // Held under the lock, so a job starting meanwhile finds the arenas idle
            // and sets them back to keeping pages after this.
            for arena in &self.jobs.arenas {
                let _ = arena.return_freed();
            }
        }
    }
}
