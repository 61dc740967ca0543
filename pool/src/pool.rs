//! `ArenaPool`: a rayon pool whose every job runs in an arena of its own.

use std::fmt;

use arenapool_alloc::Report;
use rayon::ThreadPool;

use crate::binding;
use crate::gate::Gate;
use crate::job::Job;
use crate::stream::{MapStream, StreamJob};
use crate::ArenaPoolBuilder;

/// A rayon thread pool that runs each job in a jemalloc arena of its own and gives
/// that arena's free pages back to the OS when the job ends.
///
/// Inside [`run`](ArenaPool::run), rayon code works as usual (`par_iter`, `join`,
/// `scope`), and everything the pool's threads allocate comes from the job's arena.
/// When the job ends, scratch memory is already back with the OS; what the job returned
/// stays valid and its pages go back as soon as it is dropped.
/// [`map_stream`](ArenaPool::map_stream) maps a function over a stream of inputs with
/// a bounded number of results in memory at once.
///
/// [`ArenaAlloc`](arenapool_alloc::ArenaAlloc) must be the global allocator; without
/// it jobs still run, without an arena, and a warning is printed once.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// use arenapool_pool::ArenaPool;
/// use rayon::prelude::*;
///
/// let pool = ArenaPool::builder().num_threads(2).build()?;
/// let (sums, report) = pool.run_with_report(|| {
///     (0..64)
///         .into_par_iter()
///         .map(|i| vec![i as f64; 100_000].iter().sum::<f64>()) // 800 KB of scratch each
///         .collect::<Vec<f64>>()
/// });
/// assert_eq!(sums[3], 300_000.0);
/// println!("{report}"); // ran .., gave back .. in ..; RSS .. -> ..
/// # Ok::<(), arenapool_pool::BuildError>(())
/// ```
pub struct ArenaPool {
    threads: ThreadPool,
    gate: Gate,
    window: usize,
}

impl ArenaPool {
    /// A builder for a pool: thread count, names, stack size, stream window.
    pub fn builder() -> ArenaPoolBuilder {
        ArenaPoolBuilder::new()
    }

    pub(crate) fn new(threads: ThreadPool, window: usize) -> Self {
        ArenaPool {
            threads,
            gate: Gate::default(),
            window,
        }
    }

    /// The number of worker threads.
    pub fn current_num_threads(&self) -> usize {
        self.threads.current_num_threads()
    }

    /// How many results [`map_stream`](ArenaPool::map_stream) lets exist at once (see
    /// [`ArenaPoolBuilder::stream_window`]).
    pub fn stream_window(&self) -> usize {
        self.window
    }

    /// Whether the calling thread is inside a job of this pool: a worker of it, or the
    /// thread holding the stream that is running.
    fn in_job(&self) -> bool {
        self.threads.current_thread_index().is_some() || self.gate.is_held_by_current_thread()
    }

    /// Runs `f` as one job on the pool, with every worker allocating from the job's
    /// arena, and gives the arena's free pages back to the OS before returning.
    ///
    /// `f` runs on one of the pool's threads, like rayon's `install`; rayon calls inside
    /// it (`par_iter`, `join`, `scope`, `spawn`) use this pool. Every worker is bound to
    /// the job's arena from the job's start to its end, and flushes its thread cache
    /// before it is unbound, so what the job freed is free in the arena when it is purged.
    ///
    /// # Warning: what escapes a job
    ///
    /// What `f` returns, and whatever the job stored where it outlives the job, stays
    /// valid: an arena is never reset. Such memory is freed at full speed wherever it
    /// is dropped, and its pages go back to the OS at once. Until then it is resident,
    /// and a page that holds one such object cannot be given back.
    ///
    /// A `rayon::spawn` task that is running when `f` returns holds up the end of the
    /// job: its worker is unbound only after the task in hand, so the task goes on in
    /// the job's arena and `run` returns after it. Spawned work escapes the job in two
    /// ways, and then goes on outside its arena, even after `run` has returned: a task
    /// still queued when `f` returns may be taken by a worker already unbound, and a
    /// task that waits inside `join` or `scope` lets its worker be unbound during the
    /// wait, so the rest of it runs unbound. Use `rayon::scope` inside `f` for spawned
    /// work that must end with the job.
    ///
    /// Work sent to other pools, or to threads that are not the pool's, allocates
    /// outside the arena. Thread-locals a worker initialises during the job live in the
    /// arena, and the pages they occupy are not given back while the thread lives.
    ///
    /// # Warning: one job at a time
    ///
    /// A pool runs one job at a time. When several threads call `run` (or
    /// [`map_stream`](ArenaPool::map_stream)) on the same pool, the calls queue: each
    /// waits until the job before it has ended, so a worker bound to one job never runs
    /// another's. A `run` from inside a job of the same pool (from `f`, from a stream's
    /// task, or from the thread consuming a stream) does not wait: it runs inline, as
    /// part of the enclosing job, in that job's arena. Two pools whose jobs each call
    /// `run` on the other can deadlock, as with any two locks.
    ///
    /// A job must not wait for a thread of its own (one started with
    /// `std::thread::scope`, say) that calls `run` on the same pool: that thread is
    /// neither a worker nor the caller, so its `run` queues behind the job that waits
    /// for it, and neither ever ends.
    ///
    /// Spawned work that outlives its job (see above) belongs to no job. A worker busy
    /// with it takes the next job's binding only when the task ends or waits inside
    /// `join` or `scope`, which holds up the start of that job's `f`; what of it runs
    /// on a worker bound to that job allocates from that job's arena.
    ///
    /// # Panics
    ///
    /// If `f` panics, the panic reaches the caller after the job has been cleaned up:
    /// every worker unbound, the arena purged and recycled, the pool free for the next
    /// job.
    pub fn run<R, F>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        if self.in_job() {
            return self.threads.install(f);
        }
        match Job::begin(&self.threads, &self.gate) {
            Ok(job) => job.run(f),
            Err(unscoped) => {
                let _ticket = unscoped.start();
                self.threads.install(f)
            }
        }
    }

    /// Like [`run`](ArenaPool::run), and reports what the job did to memory: RSS
    /// before and after, bytes given back, time running and time purging.
    ///
    /// The [`Report`] is the same as [`with_arena_report`]'s. Its run time covers
    /// handing the job to the pool, binding the workers and `f`; its purge time covers
    /// unbinding the workers (each flushes its cache, and jemalloc purges the arena as
    /// the last one leaves) and the final purge. `rss_after` is measured after the
    /// purge but before the caller drops what the job returned.
    ///
    /// Called from inside a job of the same pool, it runs inline like `run`, and the
    /// report covers a purge of the enclosing job's arena, which gives back what every
    /// part of that job has freed so far: its run time covers `f`, its purge time that
    /// purge.
    ///
    /// [`with_arena_report`]: arenapool_alloc::with_arena_report
    pub fn run_with_report<R, F>(&self, f: F) -> (R, Report)
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        if self.in_job() {
            return self.threads.install(|| match binding::job_arena() {
                Some(arena) => arena.run_with_report(|| (), f),
                None => arenapool_alloc::with_arena_report(f),
            });
        }
        match Job::begin(&self.threads, &self.gate) {
            Ok(job) => job.run_with_report(f),
            Err(unscoped) => {
                let _ticket = unscoped.start();
                Report::without_arena(|| self.threads.install(f))
            }
        }
    }

    /// Maps `f` over `inputs` on the pool, yielding results in input order with at most
    /// [`stream_window`](ArenaPool::stream_window) results in memory at once.
    ///
    /// The stream is one job: it holds the pool from this call until the iterator is
    /// dropped, and every task allocates from the stream's arena, which is purged at
    /// the end. Inputs are pulled on the calling thread, only as the window has room,
    /// so an endless iterator works.
    ///
    /// The window counts every result that exists: being computed, computed but not yet
    /// consumed, and the one the caller holds. The next task starts when `next` is
    /// called, so a loop that drops each result before asking for the next keeps peak
    /// memory at about `window × (result + task scratch)`, plus shared state. Dropping
    /// the iterator stops new work, waits for the tasks already running, and frees every
    /// result not yet consumed.
    ///
    /// `f` and the inputs are `'static` so that no task can outlive data it borrows
    /// (the iterator may be leaked). Share large state through an [`Arc`], once, not
    /// per task:
    ///
    /// ```
    /// # #[global_allocator]
    /// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
    /// use std::sync::Arc;
    ///
    /// let pool = arenapool_pool::ArenaPool::builder().num_threads(2).build()?;
    /// let table = Arc::new(vec![1.5f64; 1 << 20]); // shared by every task, never copied
    /// let scaled = pool.map_stream(0..100u32, move |i| {
    ///     table.iter().map(|x| x * f64::from(i)).sum::<f64>()
    /// });
    /// for (i, sum) in scaled.enumerate() {
    ///     assert_eq!(sum, 1.5 * (1 << 20) as f64 * i as f64);
    /// }
    /// # Ok::<(), arenapool_pool::BuildError>(())
    /// ```
    ///
    /// A closure that borrows local data is rejected:
    ///
    /// ```compile_fail,E0597
    /// # let pool = arenapool_pool::ArenaPool::builder().build().unwrap();
    /// let table = vec![1.5f64; 1024];
    /// let sums: Vec<f64> = pool.map_stream(0..4, |i| table[i] * 2.0).collect();
    /// ```
    ///
    /// So are inputs that borrow it:
    ///
    /// ```compile_fail,E0597
    /// # let pool = arenapool_pool::ArenaPool::builder().build().unwrap();
    /// let table = vec![1.5f64; 1024];
    /// let sums: Vec<f64> = pool.map_stream(table.iter(), |x| x * 2.0).collect();
    /// ```
    ///
    /// # Warning: one job at a time
    ///
    /// While the iterator exists, the pool runs no other job: `run` and `map_stream`
    /// from other threads wait until it is dropped, or forever if it is leaked. From the
    /// thread that holds the iterator, and from inside the tasks, `run` and
    /// `map_stream` run inline, in the stream's arena. The iterator cannot be sent to
    /// another thread, which is what makes that rule hold.
    ///
    /// # Panics
    ///
    /// If `f` panics on an input, `next` re-raises that panic at that input's place in
    /// the order, after stopping new work; the iterator then yields nothing more.
    ///
    /// [`Arc`]: std::sync::Arc
    pub fn map_stream<I, F, T>(&self, inputs: I, f: F) -> MapStream<'_, I::IntoIter, T>
    where
        I: IntoIterator,
        I::Item: Send + 'static,
        F: Fn(I::Item) -> T + Send + Sync + 'static,
        T: Send + 'static,
    {
        let job = if self.in_job() {
            StreamJob::Inline
        } else {
            match Job::begin(&self.threads, &self.gate) {
                Ok(mut job) => {
                    job.bind_workers();
                    StreamJob::Own(job)
                }
                Err(unscoped) => StreamJob::Unscoped {
                    _ticket: unscoped.start(),
                },
            }
        };
        MapStream::new(&self.threads, job, self.window, inputs.into_iter(), f)
    }
}

impl fmt::Debug for ArenaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaPool")
            .field("num_threads", &self.threads.current_num_threads())
            .field("stream_window", &self.window)
            .finish_non_exhaustive()
    }
}
