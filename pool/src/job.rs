//! A job: the pool to itself, an arena of its own, every worker bound to it.

use std::sync::Arc;
use std::time::Instant;

use arenapool_alloc::{Arena, Error, Report};
use rayon::ThreadPool;

use crate::binding::WorkerBinding;
use crate::gate::{Gate, Ticket};

/// A job in progress. Dropping it (also while unwinding from a panic) unbinds every
/// worker, which flushes their caches; then purges the arena and returns it to the
/// recycler; then lets the next job in.
#[derive(Debug)]
pub(crate) struct Job<'p> {
    threads: &'p ThreadPool,
    // Fields drop in declaration order, which is the order cleanup must follow.
    workers: Option<WorkerBinding<'p>>,
    arena: Arc<Arena>,
    _ticket: Ticket<'p>,
}

/// A job for which no arena could be had: it holds the pool like any other job, but
/// its memory is not given back.
#[derive(Debug)]
pub(crate) struct Unscoped<'p> {
    error: Error,
    ticket: Ticket<'p>,
}

impl<'p> Unscoped<'p> {
    /// Warns, once per process, that jobs run without an arena, and goes on without
    /// one: the job holds the pool until the returned ticket is dropped.
    pub(crate) fn start(self) -> Ticket<'p> {
        self.error.warn_once();
        self.ticket
    }
}

impl<'p> Job<'p> {
    /// Waits until the pool runs no other job, then takes an arena for this one.
    pub(crate) fn begin(threads: &'p ThreadPool, gate: &'p Gate) -> Result<Self, Unscoped<'p>> {
        let ticket = gate.enter();
        match Arena::new() {
            Ok(arena) => Ok(Job {
                threads,
                workers: None,
                arena: Arc::new(arena),
                _ticket: ticket,
            }),
            Err(error) => Err(Unscoped { error, ticket }),
        }
    }

    /// Binds every worker to the job's arena until the job ends.
    pub(crate) fn bind_workers(&mut self) {
        debug_assert!(self.workers.is_none());
        self.workers = Some(WorkerBinding::bind(self.threads, &self.arena));
    }

    /// Runs `f` on the pool with every worker bound, then ends the job.
    ///
    /// Workers are bound and unbound from inside the pool, by the worker that runs
    /// `f`: the caller hands work to the pool once, not three times.
    pub(crate) fn run<R, F>(self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let (threads, arena) = (self.threads, &self.arena);
        threads.install(|| {
            let _workers = WorkerBinding::bind(threads, arena);
            f()
        })
    }

    /// Runs `f` on the pool with every worker bound, unbinds them, purges the arena
    /// and reports, then ends the job. As with `with_arena_report`, the report's purge
    /// time covers unbinding the workers (they flush their caches, and jemalloc purges
    /// the arena as the last one leaves) and the final purge; its run time covers the
    /// hand-off to the pool, binding the workers and `f`.
    pub(crate) fn run_with_report<R, F>(self, f: F) -> (R, Report)
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let (threads, arena) = (self.threads, &self.arena);
        let ((value, unbinding), mut report) = arena.run_with_report(
            || (),
            || {
                threads.install(|| {
                    let workers = WorkerBinding::bind(threads, arena);
                    let value = f();
                    let started = Instant::now();
                    drop(workers);
                    (value, started.elapsed())
                })
            },
        );
        // The unbinding happened inside the part timed as running.
        report.run_time = report.run_time.saturating_sub(unbinding);
        report.purge_time += unbinding;
        (value, report)
    }

    /// Ends a job whose results the calling thread has been dropping (a stream's
    /// consumer): unbinds the workers, then purges the arena after flushing the calling
    /// thread's cache, where small objects it freed are held.
    pub(crate) fn finish(mut self) {
        self.workers = None;
        let _ = self.arena.purge();
    }
}
