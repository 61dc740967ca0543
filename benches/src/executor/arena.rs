//! The arenapool contender's pool: every call into `arenapool-pool` is in this module.

use arenapool_pool::ArenaPool;

/// An [`ArenaPool`]: every parallel phase is one job in an arena of its own, purged
/// when it ends; streams run in the stream's arena.
#[derive(Debug)]
pub(super) struct Pool(ArenaPool);

impl Pool {
    pub(super) fn new(threads: usize, window: usize) -> Result<Pool, String> {
        ArenaPool::builder()
            .num_threads(threads)
            .stream_window(window)
            .build()
            .map(Pool)
            .map_err(|e| format!("cannot build the arena pool: {e}"))
    }

    pub(super) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.0.run(f)
    }

    pub(super) fn map_stream<T, R, F>(
        &self,
        inputs: impl IntoIterator<Item = T> + 'static,
        f: F,
    ) -> Box<dyn Iterator<Item = R> + '_>
    where
        T: Send + 'static,
        R: Send + 'static,
        F: Fn(T) -> R + Send + Sync + 'static,
    {
        Box::new(self.0.map_stream(inputs, f))
    }
}
