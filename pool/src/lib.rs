//! A rayon thread pool that gives memory back to the OS when a parallel job is done.
//!
//! A parallel phase that builds gigabytes of results and then drops them leaves the
//! process holding most of that memory: the allocator keeps freed pages in per-thread
//! heaps or until its timers run out. An [`ArenaPool`]'s threads allocate from jemalloc
//! arenas of the pool's own, one per thread, and the pool gives their free pages back
//! when each job ends, so scratch memory is gone when [`run`](ArenaPool::run) returns
//! and the results' pages go back to the OS as soon as they are dropped. A job costs
//! what rayon's `install` costs, plus a few control calls for each worker that did
//! something in it (workers left idle cost a few loads): no thread is interrupted at
//! its start or end.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
//!
//! use arenapool_pool::ArenaPool;
//! use rayon::prelude::*;
//!
//! let pool = ArenaPool::builder().num_threads(2).build()?;
//! let before = arenapool_alloc::rss();
//! let results: Vec<Vec<f64>> = pool.run(|| {
//!     (0..200)
//!         .into_par_iter()
//!         .map(|i| {
//!             let scratch = vec![1.0 + i as f64; 50_000]; // freed inside the job
//!             scratch.iter().map(|x| x * 2.0).collect() // 400 KB that escapes
//!         })
//!         .collect()
//! });
//! assert_eq!(results[10][0], 22.0);
//! drop(results); // 80 MB: the pages go back to the OS now, not in ten seconds
//! assert!(arenapool_alloc::rss() < before + (32 << 20));
//! # Ok::<(), arenapool_pool::BuildError>(())
//! ```
//!
//! - [`ArenaPool::run`], [`ArenaPool::run_with_report`]: one parallel job; rayon code
//!   inside works as usual, and jobs from several threads run side by side.
//! - [`ArenaPool::map_stream`]: an ordered map over a stream of inputs with at most
//!   [`stream_window`](ArenaPoolBuilder::stream_window) results in memory at once.
//! - [`ArenaPool::builder`]: thread count, names, stack size and window, as in rayon,
//!   and [`keep_warm`](ArenaPoolBuilder::keep_warm) for jobs run back to back.
//!
//! [`ArenaAlloc`](arenapool_alloc::ArenaAlloc) must be the program's global allocator.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, missing_debug_implementations)]

mod builder;
mod error;
mod job;
mod pool;
mod stream;
mod workers;

pub use self::builder::ArenaPoolBuilder;
pub use self::error::BuildError;
pub use self::pool::ArenaPool;
pub use self::stream::MapStream;

// The README's examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

// The crate's own unit tests run under the allocator the pool is for.
#[cfg(test)]
#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
