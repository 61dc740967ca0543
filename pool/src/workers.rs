//! A pool's workers: each bound to an arena of the pool's for its whole life.
//!
//! A worker's start handler takes an arena and binds the thread to it; its exit handler
//! unbinds it (flushing its cache) and lets go of the arena. The pool waits, when it is
//! dropped, until every worker has exited, so that no thread is still bound to one of
//! its arenas once the drop returns; except when it is dropped on a rayon worker (of
//! any pool), where waiting could deadlock (see [`Roster::wait_exited`]).

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use arenapool_alloc::{Arena, Binding, Error};

thread_local! {
    /// The pool this worker thread belongs to, and its binding to its arena.
    static WORKER: RefCell<Option<Worker>> = const { RefCell::new(None) };
}

struct Worker {
    /// Dropping it flushes the worker's cache and restores its own arena.
    _binding: Option<Binding<'static>>,
}

/// What the pool and its workers share: the arenas the workers took, and how many
/// workers are alive.
#[derive(Debug)]
pub(crate) struct Roster {
    /// Whether the workers' arenas have huge pages.
    huge_pages: bool,
    state: Mutex<RosterState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct RosterState {
    /// Workers whose start handler has run and whose exit handler has not.
    alive: usize,
    /// Workers whose start handler has run, ever.
    started: usize,
    /// Each started worker's arena, by worker index.
    arenas: Vec<(usize, Arc<Arena>)>,
    /// The first error a worker met taking an arena.
    error: Option<Error>,
}

impl Roster {
    /// A roster for workers whose arenas have huge pages if `huge_pages`.
    pub(crate) fn new(huge_pages: bool) -> Roster {
        Roster {
            huge_pages,
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, RosterState> {
        // Nothing panics while the lock is held; a poisoned roster is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// rayon's start handler for worker `index`: binds the thread to an arena of its
    /// own for its whole life, or runs it unbound if no arena can be had.
    pub(crate) fn start_worker(self: &Arc<Self>, index: usize) {
        let (binding, arena) = match Arena::with_huge_pages(self.huge_pages) {
            Ok(arena) => {
                arena.mark_pool_worker();
                let arena = Arc::new(arena);
                (Some(arena.bind_shared()), Ok(arena))
            }
            Err(e) => (None, Err(e)),
        };
        WORKER.with(|worker| {
            *worker.borrow_mut() = Some(Worker { _binding: binding });
        });
        let mut state = self.state();
        match arena {
            Ok(arena) => state.arenas.push((index, arena)),
            Err(e) => {
                state.error.get_or_insert(e);
            }
        }
        state.alive += 1;
        state.started += 1;
        drop(state);
        self.changed.notify_all();
    }

    /// rayon's exit handler: unbinds the worker (flushing its cache into the arenas its
    /// objects came from) and lets go of its arena.
    pub(crate) fn exit_worker(&self) {
        let worker = WORKER.with(|worker| worker.borrow_mut().take());
        drop(worker);
        let mut state = self.state();
        state.alive -= 1;
        drop(state);
        self.changed.notify_all();
    }

    /// Waits until `n` workers have started; returns their arenas in worker order, and
    /// the first error a worker met taking one (that worker runs unbound).
    pub(crate) fn wait_started(&self, n: usize) -> (Vec<Arc<Arena>>, Option<Error>) {
        let mut state = self.state();
        while state.started < n {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.arenas.sort_by_key(|(index, _)| *index);
        let arenas = state.arenas.drain(..).map(|(_, arena)| arena).collect();
        (arenas, state.error.take())
    }

    /// Waits until every worker has exited, unless the calling thread is a rayon
    /// worker: one of this pool's cannot wait for its own exit, and one of another
    /// pool's may be the thread that work still queued on this pool waits for (a
    /// leftover `spawn` task that calls into that pool), which would never end. There
    /// the workers exit on their own after the drop, as rayon's do, each flushing its
    /// cache and letting go of its arena as it goes.
    pub(crate) fn wait_exited(&self) {
        if rayon::current_thread_index().is_some() {
            return;
        }
        let mut state = self.state();
        while state.alive > 0 {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Held by the pool after its thread pool: dropping it waits until every worker has
/// exited (see [`Roster::wait_exited`]).
#[derive(Debug)]
pub(crate) struct WaitForWorkers(Arc<Roster>);

impl WaitForWorkers {
    pub(crate) fn new(roster: Arc<Roster>) -> Self {
        WaitForWorkers(roster)
    }
}

impl Drop for WaitForWorkers {
    fn drop(&mut self) {
        self.0.wait_exited();
    }
}
