//! `ArenaPool`: a rayon pool whose workers allocate from the pool's own arenas.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use arenapool_alloc::{Arena, Report};
use rayon::ThreadPool;

use crate::job::Jobs;
use crate::stream::MapStream;
use crate::workers::{Roster, WaitForWorkers};
use crate::ArenaPoolBuilder;

/// A rayon thread pool whose threads allocate from arenas of the pool's own, and that
/// gives those arenas' free pages back to the OS when each job ends.
///
/// Inside [`run`](ArenaPool::run), rayon code works as usual (`par_iter`, `join`,
/// `scope`), and everything the pool's threads allocate comes from the pool's arenas:
/// one per worker, bound to it for the pool's life. While a job runs, the arenas keep
/// what the job frees for reuse, at jemalloc's full speed. When it ends, their free
/// pages go back to the OS, and until the next job starts, whatever is freed in them
/// (the job's results, when the caller drops them) goes back the moment it is freed.
/// [`map_stream`](ArenaPool::map_stream) maps a function over a stream of inputs with
/// a bounded number of results in memory at once.
///
/// [`ArenaAlloc`](arenapool_alloc::ArenaAlloc) must be the global allocator; without
/// it jobs still run, without arenas, and a warning is printed once.
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
///
/// # Warning: what stays resident between jobs
///
/// Each worker keeps a thread cache: up to a few hundred freed objects of each size up
/// to 32 KiB, which it reuses in the next job. Their pages stay resident while they are
/// cached, so after a job a few MiB per worker typically remain, and at most
/// [`thread_cache_worst_case`](arenapool_alloc::thread_cache_worst_case) per worker
/// (46.3 MiB with jemalloc's defaults: every cached object alone in its slab, an
/// allocation pattern docs/design.md describes). Dropping the pool flushes every
/// worker's cache and gives all of it back.
///
/// # Dropping the pool
///
/// Dropping an `ArenaPool` tells its workers to exit, as dropping a rayon `ThreadPool`
/// does, and then waits until they have, so that when the drop returns every worker has
/// flushed its cache and let go of its arena. On a thread that is a rayon worker (of
/// this pool, inside a job, or of any other pool) the drop does not wait: work still
/// queued on this pool (a `spawn` task left behind) may be waiting for that very thread,
/// and the wait would never end. The workers then exit on their own once their queued
/// work is done, and their arenas are given back as they go, as with rayon.
///
/// # Warning: `fork`
///
/// A child made by `fork` has none of the pool's threads: they are the parent's. In
/// the child, [`run`](ArenaPool::run), [`run_with_report`](ArenaPool::run_with_report)
/// and [`map_stream`](ArenaPool::map_stream) of a pool built before the fork panic
/// with a message that says so (rather than wait for ever for a worker), and dropping
/// the pool leaves its parts alone (its arenas stay checked out in the child). Build a
/// new pool in the child: it works as in any process.
pub struct ArenaPool {
    // Fields drop in declaration order, which is the order shutdown must follow: the
    // workers are told to exit, the drop waits until they have (each unbinds and
    // flushes its cache; not on a rayon worker, see above), then the arenas are
    // released. Dropped by hand (see `Drop`), in that order, and only in the process
    // that built the pool.
    threads: ManuallyDrop<ThreadPool>,
    _exited: ManuallyDrop<WaitForWorkers>,
    jobs: ManuallyDrop<Jobs>,
    window: usize,
    /// The process that built the pool and has its threads.
    process: u32,
}

impl ArenaPool {
    /// A builder for a pool: thread count, names, stack size, stream window.
    pub fn builder() -> ArenaPoolBuilder {
        ArenaPoolBuilder::new()
    }

    pub(crate) fn new(threads: ThreadPool, roster: Arc<Roster>, jobs: Jobs, window: usize) -> Self {
        ArenaPool {
            threads: ManuallyDrop::new(threads),
            _exited: ManuallyDrop::new(WaitForWorkers::new(roster)),
            jobs: ManuallyDrop::new(jobs),
            window,
            process: std::process::id(),
        }
    }

    /// Whether this is the process that built the pool, and not a child made by `fork`
    /// since, which has none of its threads.
    fn in_own_process(&self) -> bool {
        self.process == std::process::id()
    }

    /// Panics in a child made by `fork` after the pool was built (see the type's docs).
    #[track_caller]
    fn check_process(&self, call: &str) {
        assert!(
            self.in_own_process(),
            "arenapool: ArenaPool::{call} in a child made by fork: the pool's worker threads \
             are the parent's (process {}), and this process has none of them; build a new \
             ArenaPool in the child",
            self.process
        );
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

    /// jemalloc's indices of the pool's arenas, one per worker in worker order (empty if
    /// the pool runs without arenas: see [`ArenaAlloc`](arenapool_alloc::ArenaAlloc)).
    /// Everything the pool's workers allocate comes from these.
    pub fn arena_indices(&self) -> Vec<u32> {
        self.jobs
            .arenas()
            .iter()
            .map(|arena| arena.index())
            .collect()
    }

    /// Runs `f` as one job on the pool, and gives the pool's free pages back to the OS
    /// when it ends.
    ///
    /// `f` runs on one of the pool's threads, exactly as with rayon's `install`; rayon
    /// calls inside it (`par_iter`, `join`, `scope`, `spawn`) use this pool, and all that
    /// the workers allocate comes from the pool's arenas. While the job runs they keep
    /// the pages it frees, for reuse; when it ends, every free page goes back to the OS
    /// (a few control calls by the calling thread for each arena whose worker did
    /// something: the workers are not interrupted, and nothing waits for them), or, with
    /// [`keep_warm`](crate::ArenaPoolBuilder::keep_warm), once the pool has been idle
    /// that long. `run` from inside a job of the same pool is part of that job.
    ///
    /// An arena whose worker did nothing in the last job costs nothing at the next
    /// one's start: it goes on giving freed pages back at once until its worker
    /// allocates a block of 16 KiB or more, or its first purge runs (see
    /// [`Arena::retain_freed_on_use`]), which makes it keep them for the rest of the
    /// job; its end then costs only a few loads if nothing happened in it. So a job of a
    /// few tasks on a wide pool pays for the workers it uses, not for all of them.
    ///
    /// # Warning: what escapes a job
    ///
    /// What `f` returns, and whatever the job stored where it outlives the job, stays
    /// valid: an arena is never reset. Such memory is freed at full speed wherever it
    /// is dropped, and while no job runs its pages go back to the OS at once. Until then
    /// it is resident, and a page that holds one such object cannot be given back.
    ///
    /// Work that `f` leaves behind (`rayon::spawn` tasks still queued or running when it
    /// returns) does not hold `run` up, as with `install`: it goes on, on the pool's
    /// workers and in the pool's arenas, as part of whichever job runs then, or of none.
    /// Use `rayon::scope` inside `f` for spawned work that must end with the job.
    ///
    /// Thread-locals a worker initialises live in the pool's arenas for the worker's
    /// life, as does what each worker keeps in its thread cache (see the type's docs).
    ///
    /// # Warning: jobs share the pool
    ///
    /// Several threads may call `run` (or [`map_stream`](ArenaPool::map_stream)) on the
    /// same pool at once, as with `install`: the jobs run side by side on the same
    /// workers and share the pool's arenas. Free pages go back to the OS when the last
    /// of the overlapping jobs ends, not before, so no job loses its warm pages to
    /// another's end; the memory a finished job freed is therefore held until then.
    ///
    /// # Panics
    ///
    /// If `f` panics, the panic reaches the caller after the job has ended (its free
    /// pages given back, if it was the last job running). Panics in a child made by
    /// `fork` after the pool was built (see the type's docs).
    pub fn run<R, F>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        self.check_process("run");
        let _job = self.jobs.begin();
        self.threads.install(f)
    }

    /// Like [`run`](ArenaPool::run), and reports what the job did to memory: RSS
    /// before and after, bytes given back, time running and time giving back.
    ///
    /// The [`Report`] is the same as [`with_arena_report`]'s. Its run time covers
    /// handing the job to the pool and `f`; its purge time covers giving the pool's free
    /// pages back; `returned` counts every page the pool's arenas gave back meanwhile.
    /// `rss_after` is measured after that but before the caller drops what the job
    /// returned.
    ///
    /// When other jobs of the pool are still running as this one ends (see `run`'s
    /// warning), or the pool keeps its pages warm, nothing is given back yet, and the
    /// report says so: `returned` is then only what went back during the job (an
    /// explicit purge, say).
    ///
    /// # Panics
    ///
    /// As [`run`](ArenaPool::run).
    ///
    /// [`with_arena_report`]: arenapool_alloc::with_arena_report
    pub fn run_with_report<R, F>(&self, f: F) -> (R, Report)
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        self.check_process("run_with_report");
        let arenas: Vec<&Arena> = self.jobs.arenas().iter().map(|arena| &**arena).collect();
        Report::measure(
            &arenas,
            || {
                let job = self.jobs.begin();
                (self.threads.install(f), job)
            },
            |(value, job)| {
                drop(job);
                value
            },
        )
    }

    /// Maps `f` over `inputs` on the pool, yielding results in input order with at most
    /// [`stream_window`](ArenaPool::stream_window) results in memory at once.
    ///
    /// The stream is one job, from this call until the iterator is dropped: every task
    /// allocates from the pool's arenas, whose free pages go back to the OS when it
    /// ends (as for [`run`](ArenaPool::run), once no other job is running). Inputs are
    /// pulled on the calling thread, only as the window has room, so an endless
    /// iterator works.
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
    /// # Consuming on a worker thread
    ///
    /// On a thread that is not a rayon worker, `next` and the stream's `Drop` block
    /// while they wait for tasks. On one of this pool's workers `next` computes a
    /// queued task itself; on a worker of any rayon pool, this one or another, both keep
    /// running that pool's jobs while they wait, as rayon's own waits do, so a stream
    /// whose tasks call back into the consumer's pool (a `run` on it) finishes even if
    /// that pool has a single worker. Such a waiting worker looks for new jobs of its
    /// pool at least every millisecond.
    ///
    /// # Warning: a stream is a running job
    ///
    /// While the iterator exists, the pool's arenas keep freed pages for reuse, as for
    /// any running job: free pages go back when it is dropped (or never, if it is
    /// leaked). Other jobs may run meanwhile, sharing the workers and the arenas (see
    /// `run`'s warning).
    ///
    /// # Panics
    ///
    /// If `f` panics on an input, `next` re-raises that panic at that input's place in
    /// the order, after stopping new work; the iterator then yields nothing more. In a
    /// child made by `fork` after the pool was built, `map_stream` itself panics (see the
    /// type's docs).
    ///
    /// [`Arc`]: std::sync::Arc
    pub fn map_stream<I, F, T>(&self, inputs: I, f: F) -> MapStream<'_, I::IntoIter, T>
    where
        I: IntoIterator,
        I::Item: Send + 'static,
        F: Fn(I::Item) -> T + Send + Sync + 'static,
        T: Send + 'static,
    {
        self.check_process("map_stream");
        let job = self.jobs.begin();
        MapStream::new(&self.threads, job, self.window, inputs.into_iter(), f)
    }
}

impl Drop for ArenaPool {
    fn drop(&mut self) {
        if !self.in_own_process() {
            // A child made by `fork`: the workers and the keep-warm timer are the
            // parent's threads, which shutting down would wait for (and the locks they
            // share with the pool may have been held by them at the fork). Left alone:
            // their memory stays, as everything the parent's threads owned does.
            return;
        }
        // SAFETY: each field is dropped exactly once, here, and never used after; in
        // declaration order, as the fields' comment requires.
        unsafe {
            ManuallyDrop::drop(&mut self.threads);
            ManuallyDrop::drop(&mut self._exited);
            ManuallyDrop::drop(&mut self.jobs);
        }
    }
}

impl fmt::Debug for ArenaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaPool")
            .field("num_threads", &self.threads.current_num_threads())
            .field("stream_window", &self.window)
            .field("jobs", &self.jobs)
            .finish_non_exhaustive()
    }
}
