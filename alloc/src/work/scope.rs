//! `with_arena` and its twins: run a closure in an arena, give its pages back at the end.

use std::time::Instant;

use crate::error::Error;
use crate::figures::report::{self, Report};
use crate::figures::tally::{Tally, Work};
use crate::policy::idle;
use crate::work::arena::Arena;

/// Runs `f` with the calling thread bound to `arena`, then gives the arena's free pages
/// back (dropping it), counted as a scope in the running totals of
/// [`stats`](crate::stats), with what the arena gave back from the start, as a
/// [`Report`] counts it.
fn run_in<R>(arena: Arena, f: impl FnOnce() -> R) -> R {
    let tally = Tally::start(Work::Scope, None);
    let index = arena.index();
    let before = report::returned_by([index]);
    let value = arena.enter(f);
    let started = Instant::now();
    drop(arena);
    let returned = report::returned_by([index]).saturating_sub(before);
    tally.end(returned, started.elapsed());
    idle::start_once_used();
    value
}

/// Runs `f` with the calling thread's allocations in an arena of their own, then gives
/// that arena's free pages back to the OS.
///
/// Everything `f` allocates on this thread (`Vec`, `Box`, `String`, …) comes from the
/// arena. What `f` returns, or stores elsewhere, stays valid and can be dropped later
/// on any thread; its pages go back to the OS as soon as it is dropped. Scratch memory
/// freed inside `f` is returned when `f` ends. Scopes nest; the thread's previous arena
/// is restored on return and on panic (the panic then continues).
///
/// If no arena can be had (`ArenaAlloc` is not the global allocator, or jemalloc's
/// limit on arenas is reached), `f` still runs, without an arena, and a warning naming
/// the cause is printed to stderr once per process. Use [`try_with_arena`] to get the
/// error instead.
///
/// # Warning: other threads
///
/// Only the calling thread is bound. Work that `f` sends to other threads (rayon's
/// global pool, spawned threads) allocates from their arenas and is not returned at the
/// end. For parallel work, run it in an `arenapool::ArenaPool`, whose workers allocate
/// from the pool's own arenas, given back when each job ends; on threads you do not
/// own, open a [`phase`](crate::phase) around it.
///
/// # Warning: inside a rayon task
///
/// A scope opened inside a task of a rayon pool (an `ArenaPool`'s included) binds the
/// worker thread, not the task. While `f` waits in a `join`, `scope` or parallel
/// iterator of its own, rayon runs other tasks on that thread, and those run inside
/// the scope: they allocate from its arena, their scratch is given back with it, and
/// what they allocate counts in its report. Nothing becomes invalid (arenas are never
/// reset), but memory is not attributed to the work it belongs to. Open the scope
/// around the parallel work, not inside its tasks, or keep `f` free of rayon calls.
///
/// # Example
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let sums: Vec<f64> = arenapool_alloc::with_arena(|| {
///     (0..100)
///         .map(|i| {
///             let scratch = vec![i as f64; 50_000]; // 400 KB, freed inside
///             scratch.iter().sum()
///         })
///         .collect()
/// });
/// assert_eq!(sums[2], 100_000.0);
/// ```
pub fn with_arena<R>(f: impl FnOnce() -> R) -> R {
    match Arena::for_scope() {
        Ok(arena) => run_in(arena, f),
        Err(e) => {
            e.warn_once();
            f()
        }
    }
}

/// Like [`with_arena`], but returns the error instead of running `f` without an arena.
///
/// # Errors
///
/// As [`Arena::new`]: `ArenaAlloc` is not the global allocator, or too many arenas are
/// alive at once. `f` has not run.
pub fn try_with_arena<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    Ok(run_in(Arena::for_scope()?, f))
}

/// Like [`with_arena`], and also reports RSS before and after, the bytes given back and
/// the time spent running `f` and purging.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let (n, report) = arenapool_alloc::with_arena_report(|| {
///     let scratch: Vec<Vec<u8>> = (0..64).map(|_| vec![7u8; 1 << 20]).collect();
///     scratch.len()
/// });
/// assert_eq!(n, 64);
/// assert!(report.returned >= 60 << 20, "{report}");
/// println!("{report}");
/// ```
pub fn with_arena_report<R>(f: impl FnOnce() -> R) -> (R, Report) {
    match Arena::for_scope() {
        Ok(arena) => {
            let tally = Tally::start(Work::Scope, None);
            let (value, report) = Report::measure(
                &[&arena],
                || {
                    let binding = arena.bind();
                    (f(), binding)
                },
                |(value, binding)| {
                    // Unbinding flushes the thread's cache into the arena, then its free
                    // pages go back. (Dropping the arena does the latter too, after the
                    // report is made: here it is measured.)
                    drop(binding);
                    let _ = arena.return_freed();
                    value
                },
            );
            tally.end(report.returned, report.purge_time);
            idle::start_once_used();
            (value, report)
        }
        Err(e) => {
            e.warn_once();
            Report::measure(&[], f, |value| value)
        }
    }
}
