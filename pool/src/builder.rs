//! `ArenaPoolBuilder`: rayon's pool settings, plus the stream window.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arenapool_alloc::Label;

use crate::job::Jobs;
use crate::workers::Roster;
use crate::{ArenaPool, BuildError};

/// Settings for an [`ArenaPool`], in the manner of rayon's `ThreadPoolBuilder`.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// use arenapool_pool::ArenaPool;
///
/// let pool = ArenaPool::builder()
///     .num_threads(2)
///     .thread_name(|i| format!("analysis-{i}"))
///     .stream_window(8)
///     .build()?;
/// assert_eq!(pool.current_num_threads(), 2);
/// assert_eq!(pool.stream_window(), 8);
/// # Ok::<(), arenapool_pool::BuildError>(())
/// ```
#[derive(Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ArenaPoolBuilder {
    num_threads: Option<usize>,
    thread_name: Option<Box<dyn FnMut(usize) -> String>>,
    stack_size: Option<usize>,
    stream_window: Option<usize>,
    keep_warm: Duration,
    huge_pages: Option<bool>,
    label: Option<Label>,
}

impl ArenaPoolBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of worker threads. Unset or 0, rayon's default applies: the
    /// `RAYON_NUM_THREADS` environment variable, or one thread per CPU.
    ///
    /// Each worker allocates from an arena of its own, so a pool takes one jemalloc
    /// arena per thread for its life (jemalloc allows about 4,000 per process).
    pub fn num_threads(mut self, num_threads: usize) -> Self {
        self.num_threads = Some(num_threads);
        self
    }

    /// Names the worker threads: `name(i)` for the thread with index `i`.
    pub fn thread_name<F>(mut self, name: F) -> Self
    where
        F: FnMut(usize) -> String + 'static,
    {
        self.thread_name = Some(Box::new(name));
        self
    }

    /// The stack size of each worker thread, in bytes. Unset, Rust's default applies.
    pub fn stack_size(mut self, stack_size: usize) -> Self {
        self.stack_size = Some(stack_size);
        self
    }

    /// How many results [`ArenaPool::map_stream`] lets exist at once, counting those
    /// being computed, those computed but not yet consumed, and the one the caller holds.
    /// Unset, twice the number of threads. 0 makes [`build`](Self::build) fail. The
    /// stream's bookkeeping grows with the results in flight, not with the window, so
    /// a window of `usize::MAX` means "unbounded" and reserves nothing up front.
    pub fn stream_window(mut self, window: usize) -> Self {
        self.stream_window = Some(window);
        self
    }

    /// How long the pool's free pages stay resident after its last job ends, for the
    /// next job to reuse. Unset or zero (the default), they go back to the OS at the
    /// end of each job, and results dropped between jobs go back the moment they are
    /// dropped.
    ///
    /// A program that runs the same job back to back spends much of each job faulting
    /// back in the pages the previous one gave back (a page fault costs about as much
    /// as writing the page); with `keep_warm(d)` a job that starts within `d` of the
    /// last one's end reuses them, as plain jemalloc would. Everything freed in the
    /// pool's arenas meanwhile, results included, stays resident until the pool has
    /// been idle for `d`; then a thread of the pool's gives it all back at once.
    /// Dropping the pool gives it back too. docs/benchmarks.md measures both settings.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
    /// use std::time::Duration;
    ///
    /// let pool = arenapool_pool::ArenaPool::builder()
    ///     .num_threads(2)
    ///     .keep_warm(Duration::from_millis(500))
    ///     .build()?;
    /// for _ in 0..3 {
    ///     let results: Vec<Vec<u8>> = pool.run(|| vec![vec![1u8; 1 << 20]; 16]);
    ///     drop(results); // kept for the next job, returned 500 ms after the last
    /// }
    /// # Ok::<(), arenapool_pool::BuildError>(())
    /// ```
    pub fn keep_warm(mut self, idle: Duration) -> Self {
        self.keep_warm = idle;
        self
    }

    /// Whether the workers' arenas use huge pages (2 MiB) where the kernel allows them.
    /// Unset, what [`arenapool_alloc::set_huge_pages`] last set applies: off by default
    /// (its docs say when huge pages pay).
    ///
    /// With huge pages, the memory a job faults in costs a fraction of what it costs in
    /// 4 KiB pages, and the end of a job gives memory back in whole 2 MiB pages where
    /// they are free, so that the next job faults them in whole. Every free page still
    /// goes back at a job's end; a huge page that holds live small objects (those a
    /// worker's cache keeps, say) is resident in full until a purge finds its free
    /// part, so a few MiB more per worker may stay resident. `false` maps everything in
    /// 4 KiB pages, as on kernels without transparent huge pages.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
    /// let pool = arenapool_pool::ArenaPool::builder()
    ///     .num_threads(2)
    ///     .huge_pages(true)
    ///     .build()?;
    /// let total: usize = pool.run(|| vec![1u8; 8 << 20].iter().map(|&b| b as usize).sum());
    /// assert_eq!(total, 8 << 20);
    /// # Ok::<(), arenapool_pool::BuildError>(())
    /// ```
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = Some(on);
        self
    }

    /// The label the pool's jobs count under in
    /// [`arenapool_alloc::stats`]'s running totals (and in the exposition's `name`).
    /// Unset, they count as unlabelled jobs. Pools may share a label.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
    /// use arenapool_alloc::{Label, Work};
    ///
    /// let queries = Label::new("query")?;
    /// let pool = arenapool_pool::ArenaPool::builder().num_threads(2).label(queries).build()?;
    /// pool.run(|| drop((0..8).map(|_| vec![1u8; 1 << 20]).collect::<Vec<_>>()));
    /// let stats = arenapool_alloc::stats();
    /// let jobs = stats.label_totals(queries, Work::Job);
    /// assert_eq!(jobs.ended, 1);
    /// assert!(jobs.returned >= 6 << 20, "{jobs:?}"); // what the job's end gave back
    /// assert!(stats.pool.arenas >= 2); // the workers' arenas
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn label(mut self, label: Label) -> Self {
        self.label = Some(label);
        self
    }

    /// Starts the pool's threads, each bound to an arena of its own, and returns once
    /// every one of them is.
    ///
    /// If no arena can be had for a worker ([`ArenaAlloc`] is not the global allocator,
    /// or jemalloc's limit of arenas is reached), that worker runs without one and a
    /// warning naming the cause is printed to stderr once per process; the pool works,
    /// but what that worker allocates is not given back at the end of a job.
    ///
    /// # Errors
    ///
    /// `stream_window(0)` was set, or the operating system refused to start a thread
    /// (a worker, or the keep-warm timer's).
    ///
    /// [`ArenaAlloc`]: arenapool_alloc::ArenaAlloc
    pub fn build(self) -> Result<ArenaPool, BuildError> {
        if self.stream_window == Some(0) {
            return Err(BuildError::zero_window());
        }
        let huge_pages = self.huge_pages.unwrap_or_else(arenapool_alloc::huge_pages);
        let roster = Arc::new(Roster::new(huge_pages));
        let mut threads = rayon::ThreadPoolBuilder::new()
            .start_handler({
                let roster = Arc::clone(&roster);
                move |index| roster.start_worker(index)
            })
            .exit_handler({
                let roster = Arc::clone(&roster);
                move |_| roster.exit_worker()
            });
        if let Some(n) = self.num_threads {
            threads = threads.num_threads(n);
        }
        if let Some(name) = self.thread_name {
            threads = threads.thread_name(name);
        }
        if let Some(size) = self.stack_size {
            threads = threads.stack_size(size);
        }
        let threads = threads.build().map_err(BuildError::threads)?;
        let (arenas, error) = roster.wait_started(threads.current_num_threads());
        if let Some(error) = error {
            error.warn_once();
        }
        let window = self
            .stream_window
            .unwrap_or(2 * threads.current_num_threads());
        let jobs = Jobs::new(arenas, self.keep_warm, self.label).map_err(BuildError::timer)?;
        Ok(ArenaPool::new(threads, roster, jobs, window))
    }
}

impl fmt::Debug for ArenaPoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaPoolBuilder")
            .field("num_threads", &self.num_threads)
            .field("thread_name", &self.thread_name.as_ref().map(|_| "<fn>"))
            .field("stack_size", &self.stack_size)
            .field("stream_window", &self.stream_window)
            .field("keep_warm", &self.keep_warm)
            .field("huge_pages", &self.huge_pages)
            .field("label", &self.label.map(Label::name))
            .finish()
    }
}
