//! Where the parallel phases run: a plain rayon pool for the allocator contenders, an
//! `ArenaPool` for arenapool. Workloads only see this type, so every contender runs the
//! same workload code.

mod arena;
mod stream;

use crate::Contender;

/// The parallel executor of one child: `threads` workers, and an ordered, bounded
/// streaming map with a window of `2 × threads`.
#[derive(Debug)]
pub struct Executor {
    inner: Inner,
    threads: usize,
}

#[derive(Debug)]
enum Inner {
    /// Plain rayon: what a program using glibc, jemalloc or mimalloc would write.
    Rayon(rayon::ThreadPool),
    /// Every parallel phase a job of its own arena.
    Arena(arena::Pool),
}

impl Executor {
    /// The executor `contender` runs its workloads on.
    ///
    /// # Errors
    ///
    /// The pool could not be built (the message says why).
    pub fn new(contender: Contender, threads: usize) -> Result<Executor, String> {
        let inner = match contender {
            Contender::Arenapool => Inner::Arena(arena::Pool::new(threads, window(threads))?),
            _ => Inner::Rayon(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .map_err(|e| format!("cannot build the rayon pool: {e}"))?,
            ),
        };
        Ok(Executor { inner, threads })
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
            Inner::Arena(pool) => pool.run(f),
        }
    }

    /// Maps `f` over `inputs` on the pool's workers and yields the results in input
    /// order, with at most `2 × threads` results computed but not yet consumed.
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
            Inner::Rayon(pool) => Box::new(stream::Stream::new(
                pool,
                inputs.into_iter(),
                f,
                window(self.threads),
            )),
            Inner::Arena(pool) => pool.map_stream(inputs, f),
        }
    }
}

/// The streaming window: as in `ArenaPool`'s default, two results per worker.
fn window(threads: usize) -> usize {
    2 * threads
}
