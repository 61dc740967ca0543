//! Process-wide phases: while one is open, the large allocations of every thread that
//! is not bound to an arena of this crate go to the phase arenas, given back when the
//! last open phase ends.
//!
//! The rule, checked on [`ArenaAlloc`](crate::ArenaAlloc)'s large path only:
//! - a block of at least [`phase_threshold`] bytes (default: larger than any block a
//!   thread's cache holds, 32 KiB, so no thread cache ever keeps phase memory), asked
//!   for while a phase is open by a thread that is not in a scope or a pool job, goes
//!   to the thread's phase arena (each thread keeps one, see `work/percpu.rs`);
//! - everything else goes where it goes outside a phase.
//!
//! The phase arenas are made when the first phase opens, one per CPU, and kept for the
//! process's life. While a phase is open their freed pages stay for reuse (dirty decay
//! -1), up to a bound (see [`crate::policy::phase_peak`]); when the last one ends,
//! every free page goes back at once and, until the next phase, whatever is freed in
//! them goes back the moment it is freed (dirty decay 0), on any thread. Then the free
//! pages of the process's other arenas (jemalloc's own, where small objects freed
//! during the phase went, and this crate's for blocks outside phases, which keep what
//! was freed before the phase for reuse) are purged too, unless [`set_trim_after_phase`] turned that off, and glibc's
//! `malloc` heaps are trimmed (see
//! [`set_trim_c_heap_after_phase`](crate::set_trim_c_heap_after_phase)).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::figures::memory;
use crate::figures::report::{self, Report};
use crate::figures::tally::{Label, Tally, Work};
use crate::mechanism::ctl;
use crate::mechanism::fork::{self, Lock, LockGuard};
use crate::mechanism::table::Use;
use crate::mechanism::{c_heap, huge};
use crate::policy::{decay, phase_peak, purge};
use crate::work::install::ensure_routable;
use crate::work::route::{self, FLOOR, PHASE_ARENAS as ARENAS};

/// The threshold set by [`set_phase_threshold`]; 0 for the default.
static THRESHOLD: AtomicUsize = AtomicUsize::new(0);

static TRIM_AFTER: AtomicBool = AtomicBool::new(true);

/// How many phases are open. Taken only to open and end phases.
static OPEN: Lock<usize> = Lock::new(0);

fn open_count() -> LockGuard<'static, usize> {
    OPEN.lock()
}

/// In a child made by `fork` (see [`crate::mechanism::fork`]): the phases open in the
/// parent belong to the parent's threads, and none is open in the child. The phase
/// arenas keep what they kept; the child's first phase end, or [`trim`](crate::trim),
/// gives it back.
fn after_fork_in_child() {
    route::close();
    // No thread holds the lock: the fork waited for every section to end (if the forking
    // thread held it itself, it ends its phase as in the parent).
    if let Some(mut open) = OPEN.try_lock() {
        *open = 0;
    }
}

/// The smallest threshold allowed: larger than any block a thread's cache holds
/// (`arenas.tcache_max`), and a large size class.
fn smallest_threshold() -> Result<usize, Error> {
    Ok((ctl::tcache_max()? + 1).max(ctl::large_min()?).max(FLOOR))
}

/// The size from which allocations go to the phase arenas while a phase is open.
///
/// By default the smallest size that no thread's cache holds: 32 KiB + 1 with
/// jemalloc's defaults (`tcache_max` 32 KiB). Smaller blocks stay in their threads'
/// arenas and caches, as outside a phase.
pub fn phase_threshold() -> usize {
    match THRESHOLD.load(Ordering::Relaxed) {
        0 => smallest_threshold().unwrap_or((32 << 10) + 1),
        set => set,
    }
}

/// Sets the size from which allocations go to the phase arenas, at once (also for
/// phases that are open).
///
/// A higher threshold leaves more of a phase's memory in jemalloc's own arenas, which
/// keep it for seconds after it is freed (their decay).
///
/// # Errors
///
/// `bytes` is below the smallest size no thread's cache holds (see
/// [`phase_threshold`]): blocks below it would be kept by the caches of the threads
/// that free them, resident after the phase. The message gives the smallest allowed.
pub fn set_phase_threshold(bytes: usize) -> Result<(), Error> {
    let smallest = smallest_threshold()?;
    if bytes < smallest {
        return Err(Error::threshold_too_small(bytes, smallest));
    }
    let open = open_count();
    THRESHOLD.store(bytes, Ordering::Relaxed);
    if *open > 0 {
        route::open(bytes);
    }
    Ok(())
}

/// Whether the end of the last open phase also gives back the free pages of the
/// process's other arenas (jemalloc's own, where small objects freed during the phase
/// went, and the arenas for blocks outside phases, which keep large blocks freed
/// before the phase for reuse): on by default. Arenas of scopes and pools are never purged by a phase.
///
/// Turned off, the pages of small objects freed during a phase go back by jemalloc's
/// decay instead, over seconds; a program whose small objects churn between phases
/// saves the page faults of reusing them.
pub fn set_trim_after_phase(on: bool) {
    TRIM_AFTER.store(on, Ordering::Relaxed);
}

/// Whether a phase is open, on any thread.
pub fn phase_is_open() -> bool {
    *open_count() > 0
}

/// An open phase: until it is dropped, the large allocations of every thread that is
/// not in a scope or pool job go to the phase arenas.
///
/// Returned by [`enter_phase`] and [`try_enter_phase`]; for code that cannot wrap its
/// work in a closure, such as an `async` function holding it across `.await`. It can
/// be sent to and dropped on any thread: phases are process-wide. Dropping the last
/// open one gives the phase arenas' free pages back.
///
/// # Warning: leaking a guard
///
/// A guard that is never dropped (`mem::forget`, a leaked `Box`) keeps a phase open for
/// the rest of the process: large blocks keep going to the phase arenas, whose freed
/// pages stay resident for reuse and are given back only by [`trim`](crate::trim).
#[must_use = "the phase ends as soon as the guard is dropped"]
#[derive(Debug)]
pub struct PhaseGuard {
    /// Whether this guard opened a phase (false: it could not, and the work runs
    /// outside one).
    open: bool,
    /// The fork generation it was opened in (see [`crate::mechanism::fork`]): in a
    /// child made by `fork` after it opened, its phase is not open, and dropping it
    /// ends nothing.
    generation: u32,
    /// The phase in the running totals of [`stats`](crate::stats), if it opened.
    tally: Option<Tally>,
}

impl PhaseGuard {
    /// Whether this guard holds a phase open: false if [`enter_phase`] could not open
    /// one (it printed why), and in a child made by `fork` after it opened: the phases
    /// of the parent are not open in the child, and dropping the guard there ends
    /// nothing.
    pub fn is_open(&self) -> bool {
        self.open && self.generation == fork::generation()
    }
}

impl Drop for PhaseGuard {
    fn drop(&mut self) {
        if self.is_open() {
            let (returned, give_back_time) = end();
            if let Some(tally) = self.tally.take() {
                tally.end(returned, give_back_time);
            }
        }
    }
}

/// Opens a phase until the returned guard is dropped.
///
/// If no phase can be opened ([`ArenaAlloc`](crate::ArenaAlloc) is not the global
/// allocator, or jemalloc's limit on arenas is reached), the guard holds none, the work
/// runs as outside a phase, and a warning naming the cause is printed to stderr once
/// per process. [`try_enter_phase`] returns the error instead.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let phase = arenapool_alloc::enter_phase();
/// let results: Vec<Vec<f64>> = std::thread::scope(|s| {
///     let workers: Vec<_> = (0..2)
///         .map(|w| s.spawn(move || (0..50).map(|i| vec![(w * i) as f64; 50_000]).collect::<Vec<_>>()))
///         .collect();
///     workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
/// });
/// drop(phase); // the phase arenas' free pages go back; the results' when dropped
/// assert_eq!(results.len(), 100);
/// ```
pub fn enter_phase() -> PhaseGuard {
    enter(None)
}

fn enter(label: Option<Label>) -> PhaseGuard {
    try_enter(label).unwrap_or_else(|e| {
        e.warn_once();
        PhaseGuard {
            open: false,
            generation: fork::generation(),
            tally: None,
        }
    })
}

/// Like [`enter_phase`], but returns the error instead of a guard that holds no phase.
///
/// # Errors
///
/// [`ArenaAlloc`](crate::ArenaAlloc) is not the global allocator
/// ([`Error::is_not_installed`]), or, at the process's first phase, the phase arenas
/// could not be made: jemalloc's limit on arenas was reached
/// ([`Error::is_arena_limit`]), or no memory was left for their metadata
/// ([`Error::is_out_of_memory`]). No phase is open.
pub fn try_enter_phase() -> Result<PhaseGuard, Error> {
    try_enter(None)
}

fn try_enter(label: Option<Label>) -> Result<PhaseGuard, Error> {
    ensure_routable()?;
    crate::policy::idle::start();
    let generation = begin()?;
    Ok(PhaseGuard {
        open: true,
        generation,
        tally: Some(Tally::start(Work::Phase, label)),
    })
}

/// Phases under a label: their totals in [`stats`](crate::stats) are the label's.
impl Label {
    /// [`phase`] under this label.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
    /// let ingest = arenapool_alloc::Label::new("ingest")?;
    /// let n = ingest.phase(|| vec![0u8; 4 << 20].len());
    /// assert_eq!(n, 4 << 20);
    /// # Ok::<(), arenapool_alloc::Error>(())
    /// ```
    pub fn phase<R>(self, f: impl FnOnce() -> R) -> R {
        let _phase = self.enter_phase();
        f()
    }

    /// [`enter_phase`] under this label.
    pub fn enter_phase(self) -> PhaseGuard {
        enter(Some(self))
    }

    /// [`try_enter_phase`] under this label.
    ///
    /// # Errors
    ///
    /// As [`try_enter_phase`].
    pub fn try_enter_phase(self) -> Result<PhaseGuard, Error> {
        try_enter(Some(self))
    }
}

/// Runs `f` in a phase: while it runs, the large allocations of every thread of the
/// process that is not in a scope or pool job (rayon's pools, a tokio runtime,
/// `std::thread`s, the caller) come from the phase arenas; when it ends, and no other
/// phase is open, their free pages go back to the OS, and then each page the moment it
/// is freed (results, when they are dropped, on any thread).
///
/// Phases nest and overlap, from any threads: the pages go back when the last open
/// one ends. If `f` panics, the phase ends and the panic continues. If no phase can be
/// opened, `f` runs outside one (see [`enter_phase`]).
///
/// # Warning: what a phase cannot return
///
/// - Blocks smaller than [`phase_threshold`] are not in the phase arenas: what the
///   phase frees of them goes back by the end's trim of the other arenas (whole free
///   pages only), and objects held in other threads' caches stay until those threads
///   reuse or flush them.
/// - Memory that C libraries allocate with the system `malloc` is not jemalloc's.
/// - Threads inside [`with_arena`](crate::with_arena) scopes and pool jobs allocate
///   from their own arenas, given back when their work ends.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let before = arenapool_alloc::rss();
/// let results: Vec<Vec<f64>> = arenapool_alloc::phase(|| {
///     std::thread::scope(|s| {
///         let worker = s.spawn(|| (0..100).map(|i| vec![i as f64; 50_000]).collect::<Vec<_>>());
///         worker.join().unwrap() // 40 MB of results, made on another thread
///     })
/// });
/// drop(results);
/// assert!(arenapool_alloc::rss() < before + (16 << 20));
/// ```
pub fn phase<R>(f: impl FnOnce() -> R) -> R {
    let _phase = enter_phase();
    f()
}

/// Like [`phase`], but returns the error instead of running `f` outside a phase.
///
/// # Errors
///
/// As [`try_enter_phase`]; `f` has not run.
pub fn try_phase<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    let _phase = try_enter_phase()?;
    Ok(f())
}

/// Like [`phase`], and also reports RSS before and after, the bytes given back and the
/// time spent running `f` and giving back.
///
/// The report's `arenas` are the phase arenas; `returned` counts what they and the
/// process's other arenas (jemalloc's own, not those of scopes or pools) gave back from
/// the start of `f` to the end of the phase. If another phase is still open when this
/// one ends, nothing is given back yet, and `returned` is what jemalloc purged by
/// itself meanwhile.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let (n, report) = arenapool_alloc::phase_report(|| {
///     let scratch: Vec<Vec<u8>> = (0..64).map(|_| vec![7u8; 1 << 20]).collect();
///     scratch.len()
/// });
/// assert_eq!(n, 64);
/// assert!(report.returned >= 60 << 20, "{report}");
/// ```
pub fn phase_report<R>(f: impl FnOnce() -> R) -> (R, Report) {
    let phase = enter_phase().reporting();
    let value = f();
    (value, phase.end())
}

/// An open phase that reports on itself when it ends: RSS before and after, the bytes
/// given back, the time the work and the giving back took, as [`phase_report`] does,
/// for code that cannot wrap its work in a closure (a language binding's `with` block,
/// an `async` function).
///
/// Made by [`PhaseGuard::reporting`]; [`end`](ReportingPhase::end) ends the phase and
/// returns the [`Report`]. Dropped without `end`, the phase ends without a report.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let phase = arenapool_alloc::try_enter_phase()?.reporting();
/// let scratch: Vec<Vec<u8>> = (0..64).map(|_| vec![7u8; 1 << 20]).collect();
/// drop(scratch);
/// let report = phase.end();
/// assert!(report.returned >= 60 << 20, "{report}");
/// # Ok::<(), arenapool_alloc::Error>(())
/// ```
#[must_use = "the phase ends as soon as it is dropped"]
#[derive(Debug)]
pub struct ReportingPhase {
    guard: PhaseGuard,
    rss_before: usize,
    returned_before: usize,
    failed_before: u64,
    started: Instant,
}

impl PhaseGuard {
    /// This phase, measured from now on: RSS and the bytes given back so far are read
    /// at once, and [`ReportingPhase::end`] reports the difference.
    pub fn reporting(self) -> ReportingPhase {
        let (returned_before, failed_before) = if self.is_open() {
            (returned_so_far(), failed_so_far())
        } else {
            (0, 0)
        };
        ReportingPhase {
            rss_before: memory::rss(),
            returned_before,
            failed_before,
            started: Instant::now(),
            guard: self,
        }
    }
}

impl ReportingPhase {
    /// Whether a phase is held open (see [`PhaseGuard::is_open`]).
    pub fn is_open(&self) -> bool {
        self.guard.is_open()
    }

    /// Ends the phase and reports. The report's `arenas` are the phase arenas (none if
    /// no phase was open); `returned` counts what they and the process's other arenas
    /// (jemalloc's own, not those of scopes or pools) gave back from the start of the
    /// measure to the end of the phase. If another phase is still open, nothing is
    /// given back yet, and `returned` is what jemalloc purged by itself meanwhile.
    pub fn end(self) -> Report {
        let run_time = self.started.elapsed();
        let open = self.guard.is_open();
        let started = Instant::now();
        drop(self.guard);
        let purge_time = started.elapsed();
        let (arenas, returned, failed) = if open {
            let returned = returned_so_far().saturating_sub(self.returned_before);
            let failed = failed_so_far().saturating_sub(self.failed_before);
            (ARENAS.indices().collect(), returned, failed)
        } else {
            (Vec::new(), 0, 0)
        };
        Report {
            rss_before: self.rss_before,
            rss_after: memory::rss(),
            returned,
            run_time,
            purge_time,
            arenas,
            failed,
        }
    }
}

/// Bytes the phase arenas and the process's other arenas (not this crate's) have given
/// back so far.
fn returned_so_far() -> usize {
    report::returned_by(ARENAS.indices()).saturating_add(report::purged_by_others(other_arenas()))
}

/// Attempts to give back that failed so far in the phase arenas and the process's other
/// arenas.
fn failed_so_far() -> u64 {
    report::failed_by(ARENAS.indices().chain(other_arenas()))
}

/// Opens a phase: the first one sets the phase arenas to keep their freed pages, then
/// routes allocations to them. Returns the fork generation the phase is open in.
fn begin() -> Result<u32, Error> {
    let mut open = open_count();
    if *open == 0 {
        fork::on_child(after_fork_in_child);
        ARENAS.make(huge::default_setting(), Use::Phase, |_| Ok(()))?;
        if let Err(e) = ARENAS.indices().try_for_each(decay::keep_freed) {
            // No phase opens: none of the arenas may keep what is freed in them.
            for index in ARENAS.indices() {
                let _ = decay::return_freed(index);
            }
            return Err(e.into());
        }
        RETURNED_AT_OPEN.store(report::returned_by(ARENAS.indices()), Ordering::Relaxed);
        route::open(phase_threshold());
    }
    *open += 1;
    // Read under the lock: a child's handler resets the count only once no thread holds
    // it, so the count and the generation agree.
    Ok(fork::generation())
}

/// What the phase arenas had given back when the first of the phases open now opened
/// (written and read under the lock of [`OPEN`]).
static RETURNED_AT_OPEN: AtomicUsize = AtomicUsize::new(0);

/// Ends a phase: the last one stops routing, then gives every free page of the phase
/// arenas back (and from then on each page freed in them), then trims the others.
/// Returns what the phase arenas gave back since the first of the open phases opened
/// (their bound's purges while open, see [`crate::policy::phase_peak`], and the end's),
/// and the time the end took (nothing, but for the last one).
fn end() -> (usize, Duration) {
    let mut open = open_count();
    *open = open.saturating_sub(1);
    if *open > 0 {
        return (0, Duration::ZERO);
    }
    let started = Instant::now();
    route::close();
    // Small objects this thread freed go back to their arenas before those are purged.
    // No call here can fail for arenas that exist; if one did, the cost is pages left
    // resident until the next phase's end or a trim.
    let _ = ctl::thread_tcache_flush();
    for index in ARENAS.indices() {
        if decay::return_freed(index).is_err() {
            let _ = purge::purge(index);
        }
    }
    if TRIM_AFTER.load(Ordering::Relaxed) {
        for index in other_arenas() {
            let _ = purge::purge(index);
        }
    }
    let returned = report::returned_by(ARENAS.indices())
        .saturating_sub(RETURNED_AT_OPEN.load(Ordering::Relaxed));
    c_heap::trim_after_phase();
    (returned, started.elapsed())
}

/// The process's arenas that serve blocks outside phases and scopes (see
/// [`phase_peak::outside_arenas`]).
fn other_arenas() -> impl Iterator<Item = u32> {
    phase_peak::outside_arenas()
}
