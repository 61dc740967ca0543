//! Where the parallel phases run: a plain rayon pool for the allocator contenders, an
//! `ArenaPool` for arenapool, and a plain rayon pool inside `arenapool_alloc::phase`
//! for arenapool-phase. Workloads only see this type, so every contender runs the same
//! workload code.

mod arena;

use std::sync::Arc;

use arenapool_alloc::PhaseGuard;

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
    /// Plain rayon, every parallel phase inside `arenapool_alloc::phase`: what a
    /// program using arenapool writes when it cannot change its pool. (Shared with the
    /// stream's tasks, which run on it.)
    Phase(Arc<rayon::ThreadPool>),
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
        } else if contender.uses_phases() {
            Inner::Phase(Arc::new(rayon_pool(threads)?))
        } else {
            Inner::Rayon(rayon_pool(threads)?)
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
            Inner::Phase(pool) => arenapool_alloc::phase(|| pool.install(f)),
            Inner::Arena => self.streams.run(f),
        }
    }

    /// Maps `f` over `inputs` on `threads` workers and yields the results in input
    /// order, with at most `2 × threads` results in memory at once.
    ///
    /// Every contender uses `ArenaPool::map_stream`: under `ArenaAlloc` the stream runs
    /// in an arena of its own, purged at its end; under any other global allocator no
    /// arena can be had, and the same code runs as a plain ordered, bounded stream.
    ///
    /// For arenapool-phase the stream's workers, bound to arenas of their own, only
    /// order and bound the results: each task is handed to the plain rayon pool and
    /// runs there, and a phase is open from this call until the iterator is dropped, so
    /// results and scratch come from the phase arenas, as they would for a program that
    /// streams on its own pool.
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
        match &self.inner {
            Inner::Phase(pool) => {
                let phase = arenapool_alloc::enter_phase();
                let pool = Arc::clone(pool);
                let stream = self
                    .streams
                    .map_stream(inputs, move |x| pool.install(|| f(x)));
                Box::new(InPhase {
                    stream,
                    _phase: phase,
                })
            }
            Inner::Rayon(_) | Inner::Arena => self.streams.map_stream(inputs, f),
        }
    }

    /// Starts `count` new OS threads, runs `f(i)` on thread `i`, waits for them all to
    /// exit, and returns their results in order: for workloads about threads that come
    /// and go. Under arenapool each thread's body runs inside `with_arena`, as a
    /// program using arenapool would write it for threads that are not the pool's;
    /// under arenapool-phase the threads run inside one phase, from before the first
    /// starts until the last has exited.
    pub fn spawn_threads<R: Send>(&self, count: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
        let arenas = matches!(self.inner, Inner::Arena);
        let _phase = matches!(self.inner, Inner::Phase(_)).then(arenapool_alloc::enter_phase);
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

/// A stream that holds a phase open until it is dropped: the stream first, so that the
/// results it still holds are freed inside the phase.
struct InPhase<'a, R> {
    stream: Box<dyn Iterator<Item = R> + 'a>,
    _phase: PhaseGuard,
}

impl<R> Iterator for InPhase<'_, R> {
    type Item = R;

    fn next(&mut self) -> Option<R> {
        self.stream.next()
    }
}

fn rayon_pool(threads: usize) -> Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| format!("cannot build the rayon pool: {e}"))
}

/// The streaming window: as in `ArenaPool`'s default, two results per worker.
fn window(threads: usize) -> usize {
    2 * threads
}
