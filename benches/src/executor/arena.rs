//! The `ArenaPool` of a child: every call into `arenapool-pool` is in this module.

use std::time::Duration;

use arenapool_pool::ArenaPool;

/// An [`ArenaPool`]: every parallel phase is one job in an arena of its own, purged
/// when it ends; streams run in the stream's arena. Where `ArenaAlloc` is not the
/// global allocator no arena can be had, and jobs and streams run without one.
#[derive(Debug)]
pub(super) struct Pool(ArenaPool);

impl Pool {
    pub(super) fn new(threads: usize, window: usize, keep_warm: Duration) -> Result<Pool, String> {
        ArenaPool::builder()
            .num_threads(threads)
            .stream_window(window)
            .keep_warm(keep_warm)
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
