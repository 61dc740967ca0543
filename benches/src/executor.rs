//! Where the parallel phases run: a plain rayon pool for the allocator contenders, an
//! `ArenaPool` for arenapool. Workloads only see this type, so every contender runs the
//! same workload code.

mod arena;

use crate::Contender;

/// The parallel executor of one child: `threads` workers, an ordered, bounded
/// streaming map with a window of `2 × threads`, and fresh threads for the workloads
/// that create and destroy their own.
#[derive(Debug)]
pub struct Executor {
    inner: Inner,
    /// The streaming map of every contender: the same implementation for all, so that
    /// S2's time differs by the allocator only.
    streams: arena::Pool,
    threads: usize,
}

#[derive(Debug)]
enum Inner {
    /// Plain rayon: what a program using another allocator would write.
    Rayon(rayon::ThreadPool),
    /// Every parallel phase a job of its own arena (the pool is `streams`).
    Arena,
}

impl Executor {
    /// The executor `contender` runs its workloads on.
    ///
    /// # Errors
    ///
    /// A pool could not be built (the message says why).
    pub fn new(contender: Contender, threads: usize) -> Result<Executor, String> {
        let streams = arena::Pool::new(threads, window(threads), contender.keep_warm())?;
        let inner = if contender.uses_arenas() {
            Inner::Arena
        } else {
            Inner::Rayon(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .map_err(|e| format!("cannot build the rayon pool: {e}"))?,
            )
        };
        Ok(Executor {
            inner,
            streams,
            threads,
        })
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs one parallel phase: `f` runs inside the pool, so rayon's parallel iterators,
    /// `join` and `broadcast` in it use the pool's workers.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.inner {
            Inner::Rayon(pool) => pool.install(f),
            Inner::Arena => self.streams.run(f),
        }
    }

    /// Maps `f` over `inputs` on `threads` workers and yields the results in input
    /// order, with at most `2 × threads` results in memory at once.
    ///
    /// Every contender uses `ArenaPool::map_stream`: under `ArenaAlloc` the stream runs
    /// in an arena of its own, purged at its end; under any other global allocator no
    /// arena can be had, and the same code runs as a plain ordered, bounded stream.
    pub fn map_stream<T, R, F>(
        &self,
        inputs: impl IntoIterator<Item = T> + 'static,
        f: F,
    ) -> Box<dyn Iterator<Item = R> + '_>
    where
        T: Send + 'static,
        R: Send + 'static,
        F: Fn(T) -> R + Send + Sync + 'static,
    {
        self.streams.map_stream(inputs, f)
    }

    /// Starts `count` new OS threads, runs `f(i)` on thread `i`, waits for them all to
    /// exit, and returns their results in order: for workloads about threads that come
    /// and go. Under arenapool each thread's body runs inside `with_arena`, as a
    /// program using arenapool would write it for threads that are not the pool's.
    pub fn spawn_threads<R: Send>(&self, count: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
        let arenas = matches!(self.inner, Inner::Arena);
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..count)
                .map(|i| {
                    s.spawn(move || {
                        if arenas {
                            arenapool_alloc::with_arena(|| f(i))
                        } else {
                            f(i)
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    }
}

/// The streaming window: as in `ArenaPool`'s default, two results per worker.
fn window(threads: usize) -> usize {
    2 * threads
}
