//! `ArenaPoolBuilder`: rayon's pool settings, plus the stream window.

use std::fmt;

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
}

impl ArenaPoolBuilder {
    /// A builder with every setting at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of worker threads. Unset, rayon's default applies: the
    /// `RAYON_NUM_THREADS` environment variable, or one thread per CPU.
    ///
    /// Unlike rayon, 0 does not mean "the default": it makes [`build`](Self::build)
    /// fail.
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
    /// Unset, twice the number of threads. 0 makes [`build`](Self::build) fail.
    pub fn stream_window(mut self, window: usize) -> Self {
        self.stream_window = Some(window);
        self
    }

    /// Starts the pool's threads.
    ///
    /// # Errors
    ///
    /// `num_threads(0)` or `stream_window(0)` was set, or the operating system refused
    /// to start a thread.
    pub fn build(self) -> Result<ArenaPool, BuildError> {
        if self.num_threads == Some(0) {
            return Err(BuildError::zero_threads());
        }
        if self.stream_window == Some(0) {
            return Err(BuildError::zero_window());
        }
        let mut threads = rayon::ThreadPoolBuilder::new();
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
        let window = self
            .stream_window
            .unwrap_or(2 * threads.current_num_threads());
        Ok(ArenaPool::new(threads, window))
    }
}

impl fmt::Debug for ArenaPoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaPoolBuilder")
            .field("num_threads", &self.num_threads)
            .field("thread_name", &self.thread_name.as_ref().map(|_| "<fn>"))
            .field("stack_size", &self.stack_size)
            .field("stream_window", &self.stream_window)
            .finish()
    }
}
