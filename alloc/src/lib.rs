//! jemalloc arenas that give memory back to the OS when a piece of work is done.
//!
//! A program that allocates gigabytes in one phase and drops the results keeps most of
//! that memory resident: glibc malloc holds it in per-thread heaps, jemalloc until its
//! decay timers run out, mimalloc until asked. This crate binds a thread's allocations
//! to a jemalloc arena for the duration of a closure and purges the arena at the end,
//! so RSS drops back as soon as the results are dropped.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
//!
//! let before = arenapool_alloc::rss();
//! let results: Vec<Vec<f64>> = arenapool_alloc::with_arena(|| {
//!     (0..200).map(|i| vec![i as f64; 50_000]).collect() // 80 MB
//! });
//! assert_eq!(results.len(), 200);
//! drop(results); // the arena waits for reuse with decay 0: pages go back at once
//! assert!(arenapool_alloc::rss() < before + (32 << 20));
//! ```
//!
//! - [`ArenaAlloc`]: jemalloc as the global allocator, exactly as fast.
//! - [`with_arena`], [`with_arena_report`], [`try_with_arena`]: scoped binding of the
//!   calling thread, purge at the end.
//! - [`phase`], [`phase_report`], [`enter_phase`] ([`PhaseGuard`]): process-wide
//!   phases, in which the large allocations of *every* thread (rayon's pools, a tokio
//!   runtime, `std::thread`s) go to arenas given back when the last phase ends.
//! - [`RawAlloc`]: the same routing for code that does not allocate through Rust's
//!   `GlobalAlloc`, and the exact test of whether a pointer is one of ours.
//! - [`Arena`]: a recycled arena to [`enter`](Arena::enter), [`bind`](Arena::bind) and
//!   [`purge`](Arena::purge) by hand; thread pools build on it.
//! - [`memory`], [`rss`], [`trim`]: what the process holds, and giving back everything.
//! - [`stats`], [`write_prometheus`]: what the allocator holds by kind of arena, the
//!   running totals of what work gave back (by [`Label`]), for a service to export.
//!
//! Linux only for RSS figures (read from `/proc`); the arenas work wherever jemalloc does.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, missing_debug_implementations)]

// The floors, from the ground up, as folders: each module uses only modules declared
// above it, in this list and in each folder's `mod.rs` (`tests/floors.rs` checks it and
// names the few uses that run up; docs/design.md has the map).
// 1. `mechanism/`: jemalloc's control interface, the C library's heaps, the fork gate,
//    the huge-page setting, the map of the address space, the table of per-arena state,
//    the extent hooks;
// 2. the errors;
// 3. `policy/`: the purge, the decay policy (keep, give back, stand by), the return of
//    memory freed while the process is idle, the bound on what phase arenas keep;
// 4. `figures/`: bytes, the running totals and labels, memory figures, the statistics
//    snapshot and its exposition, reports;
// 5. `work/`: the checks that jemalloc is installed, the recycler of arenas, per-CPU sets
//    of them, bindings, `Arena`, the allocator's routing, phases, scopes, `RawAlloc`;
// 6. the global allocator.
mod mechanism;

mod error;

mod policy;

mod figures;

mod work;

mod global;

pub use self::error::Error;
pub use self::figures::bytes::Bytes;
pub use self::figures::exposition::{write_prometheus, Metric, MetricKind};
pub use self::figures::memory::{
    flush_thread_cache, huge_page_rss, memory, peak_rss, reset_peak_rss, rss, rss_of,
    thread_cache_worst_case, trim, Memory,
};
pub use self::figures::report::Report;
pub use self::figures::stats::{stats, Held, Stats};
pub use self::figures::tally::{Label, Tally, Work, WorkTotals, MAX_LABELS};
pub use self::global::ArenaAlloc;
pub use self::mechanism::c_heap::{
    c_heap, c_heap_freed_elsewhere, set_trim_c_heap_after_phase, CHeap, CHeapSource,
};
#[cfg(feature = "fault-injection")]
pub use self::mechanism::faults;
pub use self::mechanism::huge::{huge_pages, set_huge_pages, HUGE_PAGES_ENV};
pub use self::policy::background::{jemalloc_settings_given, stop_background_threads};
pub use self::policy::idle::{idle_return, set_idle_return, IDLE_RETURN_ENV};
pub use self::work::arena::{live_arenas, Arena};
pub use self::work::binding::{current_arena, Binding};
pub use self::work::install::is_installed;
pub use self::work::phase::{
    enter_phase, phase, phase_is_open, phase_report, phase_threshold, set_phase_threshold,
    set_trim_after_phase, try_enter_phase, try_phase, PhaseGuard, ReportingPhase,
};
pub use self::work::raw::RawAlloc;
pub use self::work::scope::{try_with_arena, with_arena, with_arena_report};

// The README's examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;

// The crate's own unit tests run under the allocator they test.
#[cfg(test)]
#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;
