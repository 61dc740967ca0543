//! Memory freed outside this crate's work goes back while the process is idle: once the
//! allocator's large path has not been used for work for a short delay, a thread of
//! this module's gives back the free pages of jemalloc's own arenas (and of this
//! crate's that wait for work), then sleeps until the path is used again.
//!
//! jemalloc purges an arena's freed ("dirty") pages as their decay time (10 s) runs
//! out, but only when something allocates or frees in that arena: a process that frees
//! 400 MiB and then waits for its next request keeps all of it. Blocks of 16 KiB and
//! more, allocated or freed, pass through [`notice`] and [`notice_free`]; a process
//! that has not worked on that path for the delay ([`DEFAULT_MS`], or
//! [`set_idle_return`]'s) is taken to be idle, and what its arenas hold free is given
//! back, as [`trim`](crate::trim) gives it back (without flushing any thread's cache).
//! While the process works, nothing changes: jemalloc's arenas keep their decay, the
//! thread wakes four times per delay to look, and once the process is idle and its
//! memory given back, it sleeps until the next large block.
//!
//! Work is what a give-back would cost: the pages it gives back that the process then
//! uses again are faulted in again, and only allocations use pages again. So a quarter
//! of the delay counts as work once the large blocks allocated in it add up to
//! [`WORK`] (4 MiB): one such block, or many smaller ones. Frees only wake the thread.
//! A trickle of blocks below that, such as the 128 KiB buffer that CPython 3.14's
//! `open()` allocates for every file it reads, does not hold the give-back off: a
//! program that reads a small file every few milliseconds is idle for it, and what a
//! give-back costs it is the trickle's pages faulted in again, at most once per delay.
//!
//! A process that computes is working too: a round in which its CPU time grew by half
//! the round or more (half a CPU, on any of its threads) is not quiet, whatever it
//! allocated, up to [`COMPUTING_ROUNDS`] in a row (30 delays). Work that allocates
//! its large blocks once per stretch of computing, seconds apart (scikit-learn's
//! random forest fits each tree on a worker thread, and makes a tree's sample arrays of
//! 16 MB as it begins), would otherwise have them given back during each stretch and
//! fault them in again for the next. A process that computes on for 30 delays without
//! a large block has what it freed given back then.
//!
//! Two other ways were measured against this one, with the benchmark suite's
//! workloads that start threads of their own (docs/design.md has the figures): jemalloc's
//! background threads, with its arenas' decay shortened to the delay, made two of them
//! 1.6x and 1.9x slower (the threads are woken by large frees in arenas whose decay is
//! -1 or 0, this crate's); a timer that ran the decay of jemalloc's arenas shortened to the
//! delay made jemalloc purge more often inside `malloc` and `free` while work runs.
//!
//! The setting is made, and the thread started, by the first [`Arena`](crate::Arena)
//! (a pool's job takes its arenas), phase or [`trim`](crate::trim) of the process, a
//! call of [`set_idle_return`] or [`idle_return`], or the end of the first scope once
//! the large path has been used; again in a child made by `fork`, which has none of its
//! parent's threads. A scope waits for the large path ([`start_once_used`]) because a
//! process that only opens scopes may have no other thread, and a second one, even
//! asleep, costs all its work: the C library then unlocks every mutex with an atomic
//! exchange, where a process of one thread stores a zero, and a scope unlocks 82
//! of jemalloc's (its bins', as the thread's cache moves to the scope's arena and
//! back). Never inside the allocator: reading the environment and starting a thread
//! both allocate, and take the C library's locks, which an allocation must not do from
//! inside another. The allocator's path only stores to atomics and wakes the thread
//! ([`notice`]). One compare-and-swap claims the thread's start, so one runs per
//! process, however many threads race to start it.

use std::io::Write;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::thread::{self, Thread};
use std::time::Duration;

use crate::mechanism::table::Use;
use crate::mechanism::{c_heap, ctl, fork, table};
use crate::policy::purge;

/// The environment variable that sets the default of [`set_idle_return`].
pub const IDLE_RETURN_ENV: &str = "ARENAPOOL_IDLE_RETURN";

/// The delay of quiet after which free memory goes back by default, in milliseconds.
const DEFAULT_MS: u64 = 1000;

/// What the allocator's large path needs to know, in one byte it loads: whether it has
/// anything to do. Below [`USED`] it has ([`noticed`]).
static NOTICE: AtomicU8 = AtomicU8::new(UNUSED);
/// The setting is not made yet, and the large path has not been used: its first use
/// moves this to [`UNSET`], so that the next scope's end makes the setting
/// ([`start_once_used`]).
const UNUSED: u8 = 0;
/// The thread waits out the delay, and the process has not worked since the round
/// began (the large blocks allocated in it add up to less than [`WORK`]).
const QUIET: u8 = 1;
/// The thread sleeps until the large path is used.
const ASLEEP: u8 = 2;
/// The thread waits out the delay, and the process worked since the round began (or
/// woke the thread).
const USED: u8 = 3;
/// No thread: the setting is off, being made, or the thread could not be started.
const NOTHING: u8 = 4;
/// The setting is not made yet in this process ([`start`] makes it), and the large path
/// has been used. Above [`USED`]: the large path has nothing to do.
const UNSET: u8 = 5;

/// The large blocks allocated in one round (a quarter of the delay) that make it a
/// round of work, in bytes (see the module's docs).
const WORK: usize = 4 << 20;

/// Bytes of large blocks allocated since the round began, counted only while it is not
/// known yet to be a round of work; the thread sets it back to 0 at each look.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// Called on the allocator's large path for an allocation or reallocation of `size`
/// bytes ([`FLOOR`](crate::work::route::FLOOR) and more): counts it towards a round of
/// work, and wakes the thread if it sleeps. One relaxed load when there is nothing to
/// do: while the process works, all but the uses before the round's first [`WORK`]
/// bytes. Atomics and a wake-up only: no allocation, no lock, no thread started (see
/// [`start`]).
#[inline]
pub(crate) fn notice(size: usize) {
    if NOTICE.load(Ordering::Relaxed) < USED {
        noticed(size);
    }
}

/// Called on the allocator's large path for a free: wakes the thread if it sleeps, so
/// that what was freed goes back once the process is idle. A free is not work (it uses
/// no page again). One relaxed load when there is nothing to do.
#[inline]
pub(crate) fn notice_free() {
    if NOTICE.load(Ordering::Relaxed) < USED {
        noticed(0);
    }
}

#[cold]
#[inline(never)]
fn noticed(size: usize) {
    match NOTICE.load(Ordering::Relaxed) {
        QUIET if size > 0 => {
            let allocated = ALLOCATED
                .fetch_add(size, Ordering::Relaxed)
                .saturating_add(size);
            if allocated >= WORK {
                let _ = NOTICE.compare_exchange(QUIET, USED, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
        ASLEEP
            if NOTICE
                .compare_exchange(ASLEEP, USED, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok() =>
        {
            wake();
        }
        UNUSED => {
            let _ = NOTICE.compare_exchange(UNUSED, UNSET, Ordering::Relaxed, Ordering::Relaxed);
        }
        _ => {}
    }
}

/// Makes the setting if it is not made yet in this process (or in this child of
/// `fork`), and starts the thread: called outside the allocator, by the first
/// [`Arena`](crate::Arena), phase, [`trim`](crate::trim) or
/// [`set_idle_return`]/[`idle_return`] call (a scope's end calls [`start_once_used`]).
/// One relaxed load once made.
#[inline]
pub(crate) fn start() {
    if matches!(NOTICE.load(Ordering::Relaxed), UNSET | UNUSED) {
        make_default();
    }
}

/// [`start`], once the allocator's large path has been used in this process (or in
/// the parent of this child of `fork`): called at the end of each scope, which
/// otherwise leaves a process of one thread with one thread (see the module's docs).
/// One relaxed load once made.
#[inline]
pub(crate) fn start_once_used() {
    if NOTICE.load(Ordering::Relaxed) == UNSET {
        make_default();
    }
}

/// The setting is made: [`make_default`] has run to its end in this process. A call
/// that reports the setting waits for it, so that it does not see one half made.
static MADE: AtomicBool = AtomicBool::new(false);

/// The thread's handle, once started: a leaked `Thread`, never freed (null in a child
/// made by `fork` until it starts its own).
static THREAD: AtomicPtr<Thread> = AtomicPtr::new(ptr::null_mut());

/// Where the start of the thread stands in this process: one of the four below. The
/// compare-and-swap out of [`NOT_STARTED`] claims the start, so one thread runs per
/// process. A child made by `fork` has none of its parent's threads, and starts again
/// from [`NOT_STARTED`] (see [`after_fork_in_child`]).
static THREAD_STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
const FAILED: u8 = 3;

fn wake() {
    // SAFETY: a non-null pointer is a leaked `Thread`, never freed.
    if let Some(thread) = unsafe { THREAD.load(Ordering::SeqCst).as_ref() } {
        thread.unpark();
    }
}

/// The delay this process chose ([`set_idle_return`], or the environment's or the
/// default when the setting was first made), in milliseconds; [`OFF`] for off and
/// [`UNCHOSEN`] before. A child made by `fork` starts again from it.
static CHOSEN: AtomicU64 = AtomicU64::new(UNCHOSEN);
const UNCHOSEN: u64 = u64::MAX;
const OFF: u64 = 0;

/// The delay chosen, `None` for off (or not chosen yet).
fn delay() -> Option<Duration> {
    match CHOSEN.load(Ordering::Relaxed) {
        OFF | UNCHOSEN => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Makes the default setting (the environment's, or [`DEFAULT_MS`]) and starts the
/// thread. Only the thread that moves [`NOTICE`] out of [`UNSET`] or [`UNUSED`] makes
/// it; never called inside the allocator (it reads the environment and may start a
/// thread, both of which allocate).
#[cold]
fn make_default() {
    // First, with the `fork` handlers: a child forked at any moment from here on, the
    // setting half made or the thread running, starts again as a fresh process does.
    fork::on_child(after_fork_in_child);
    // The large path may move `UNUSED` to `UNSET` meanwhile: the swap is tried again.
    let mut now = NOTICE.load(Ordering::Relaxed);
    loop {
        if !matches!(now, UNSET | UNUSED) {
            return;
        }
        match NOTICE.compare_exchange(now, NOTHING, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => break,
            Err(seen) => now = seen,
        }
    }
    if CHOSEN.load(Ordering::Relaxed) == UNCHOSEN {
        // A call of `set_idle_return` meanwhile wins.
        let _ = CHOSEN.compare_exchange(
            UNCHOSEN,
            from_environment(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    if delay().is_some() {
        run_thread();
    }
    MADE.store(true, Ordering::Release);
}

/// In a child made by `fork` (see [`crate::mechanism::fork`]): the thread was the
/// parent's; the child's first scope's end, phase or other call that makes the setting
/// starts its own. Only stores: what a child of a multithreaded process may do. The
/// parent's handle stays allocated, unused.
fn after_fork_in_child() {
    THREAD.store(ptr::null_mut(), Ordering::Relaxed);
    THREAD_STATE.store(NOT_STARTED, Ordering::Relaxed);
    MADE.store(false, Ordering::Relaxed);
    // The setting was made (or begun): the parent had used the large path, or called
    // for the thread. The child's next scope starts its own.
    NOTICE.store(UNSET, Ordering::Relaxed);
}

/// The delay the environment asks for, in milliseconds ([`OFF`] for off).
fn from_environment() -> u64 {
    match std::env::var(IDLE_RETURN_ENV) {
        Err(std::env::VarError::NotPresent) => DEFAULT_MS,
        Ok(value) => parse(&value).unwrap_or_else(|()| {
            // Written, not `eprintln!`ed: a failed write to stderr must not panic.
            let _ = writeln!(
                std::io::stderr(),
                "arenapool: {IDLE_RETURN_ENV}={value:?} is not `off` or a delay above 0 \
                 (`1000` or `1000ms`, `2s`): memory goes back after {DEFAULT_MS} ms idle"
            );
            DEFAULT_MS
        }),
        Err(std::env::VarError::NotUnicode(_)) => {
            let _ = writeln!(
                std::io::stderr(),
                "arenapool: {IDLE_RETURN_ENV} is not valid Unicode: memory goes back after \
                 {DEFAULT_MS} ms idle"
            );
            DEFAULT_MS
        }
    }
}

/// Parses the environment's value: `off`, or a delay above 0: a number of
/// milliseconds, or one with `ms` or `s` after it. [`OFF`] for off.
fn parse(value: &str) -> Result<u64, ()> {
    let value = value.trim();
    if matches!(value, "off" | "false" | "no" | "never") {
        return Ok(OFF);
    }
    let (number, scale) = if let Some(ms) = value.strip_suffix("ms") {
        (ms, 1)
    } else if let Some(s) = value.strip_suffix('s') {
        (s, 1000)
    } else {
        (value, 1)
    };
    match number.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n.saturating_mul(scale).min(UNCHOSEN - 1)),
        _ => Err(()),
    }
}

/// Starts the thread, or wakes the one that runs (or is being started) to wait out the
/// delay chosen now. The compare-and-swap on [`THREAD_STATE`] lets one caller start it;
/// others racing it leave it to that one. Leaves [`NOTICE`] at [`NOTHING`] if it could
/// not be started.
fn run_thread() {
    NOTICE.store(USED, Ordering::SeqCst);
    match THREAD_STATE.compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => {}
        // Runs: wake it to read the delay again.
        Err(RUNNING) => return wake(),
        // Another caller is starting it: the thread reads the delay as it begins.
        Err(STARTING) => return,
        Err(_) => return NOTICE.store(NOTHING, Ordering::SeqCst),
    }
    let spawned = thread::Builder::new()
        .name("arenapool-idle".into())
        .stack_size(128 << 10)
        .spawn(run);
    match spawned {
        Ok(handle) => {
            THREAD.store(
                Box::into_raw(Box::new(handle.thread().clone())),
                Ordering::SeqCst,
            );
            THREAD_STATE.store(RUNNING, Ordering::Release);
            // A notice that found the thread asleep before the store saw no handle.
            handle.thread().unpark();
        }
        Err(_) => {
            THREAD_STATE.store(FAILED, Ordering::Release);
            NOTICE.store(NOTHING, Ordering::SeqCst);
        }
    }
}

/// How many rounds the thread's wait for quiet is cut into: the free memory goes back
/// between the delay and a quarter more after the process last worked.
const ROUNDS: u32 = 4;

/// How many rounds in a row the process may compute without work on the large path
/// (see [`computes`]) before the rounds count as quiet again: 30 delays (30 s by
/// default). What a process that computes on without large blocks freed meanwhile goes
/// back then, as jemalloc's decay would give it back if anything allocated in its
/// arenas.
const COMPUTING_ROUNDS: u32 = 30 * ROUNDS;

/// Whether the process computed through a round of length `round`: its CPU time grew
/// by half the round or more (half a CPU busy, on any of its threads) from `before` to
/// `after`. `false` if either reading failed.
fn computes(before: Option<Duration>, after: Option<Duration>, round: Duration) -> bool {
    match (before, after) {
        (Some(before), Some(after)) => after.saturating_sub(before) >= round / 2,
        _ => false,
    }
}

/// The CPU time the process has used so far, on all its threads; `None` if the clock
/// cannot be read.
fn process_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec`; the call writes only to it.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    let seconds = u64::try_from(now.tv_sec).ok()?;
    let nanos = u32::try_from(now.tv_nsec).ok()?;
    (read == 0).then(|| Duration::new(seconds, nanos))
}

/// The thread: waits until the process has not worked (see [`WORK`]) for [`ROUNDS`]
/// rounds of a quarter of the delay in a row, gives back what the arenas hold free, and
/// sleeps until the large path is used again. A round in which the process computed
/// ([`computes`]) is not quiet, up to [`COMPUTING_ROUNDS`] in a row.
fn run() {
    loop {
        let Some(delay) = delay() else {
            // Turned off: sleep until turned on again (`run_thread` wakes it).
            thread::park();
            continue;
        };
        let round = (delay / ROUNDS).max(Duration::from_millis(1));
        let mut quiet = 0;
        let mut computing = 0;
        let mut cpu = process_cpu_time();
        while quiet < ROUNDS {
            thread::sleep(round);
            ALLOCATED.store(0, Ordering::Relaxed);
            let now = process_cpu_time();
            let computed = computes(cpu, now, round);
            cpu = now;
            match NOTICE.compare_exchange(USED, QUIET, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => (quiet, computing) = (0, 0),
                Err(QUIET) if computed && computing < COMPUTING_ROUNDS => {
                    (quiet, computing) = (0, computing + 1);
                }
                Err(QUIET) => quiet += 1,
                // Turned off meanwhile.
                Err(_) => break,
            }
        }
        if quiet < ROUNDS {
            continue;
        }
        give_back();
        // The swap decides against a notice that races: either it sees the thread
        // asleep and wakes it, or the thread sees the path used and waits again.
        if NOTICE
            .compare_exchange(QUIET, ASLEEP, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            while NOTICE.load(Ordering::SeqCst) == ASLEEP {
                thread::park();
            }
        }
    }
}

/// Gives back the free pages of jemalloc's automatic arenas, of this crate's that
/// decay as they do, of this crate's that wait for work (whose decay is 0, but
/// where jemalloc may have left pages freed while another purge ran). Arenas where work
/// runs are left alone. A purge that fails is counted in the arena's failures, and the
/// rest go on. Then the C library's heaps, as a phase's end trims them.
fn give_back() {
    let automatic = ctl::automatic_arenas().unwrap_or(0);
    let waiting = (automatic..ctl::ARENAS_ALL).filter(|&index| {
        let arena = table::arena(index);
        table::is_ours(index)
            && !table::is_stuck(index)
            && (arena.serves() == Use::Raw
                // An arena that stands by would take a purge for its worker's work.
                || (arena.idle.load(Ordering::Relaxed)
                    && !arena.standing_by.load(Ordering::Relaxed)))
    });
    for index in (0..automatic).chain(waiting) {
        let _ = purge::purge(index);
    }
    // And the C library's heaps, under the rule of a phase's end (see
    // `set_trim_c_heap_after_phase`): memory a C library freed there goes back too.
    c_heap::trim_after_phase();
}

/// Sets after how long without work on the allocator's large path (large blocks of
/// 16 KiB and more allocated: 4 MiB of them in a quarter of the delay) the process is
/// taken to be idle, and the free memory of jemalloc's own arenas is given back to the
/// OS; `None` turns that off (jemalloc's arenas then give freed pages
/// back by their decay, 10 s, but only as something allocates or frees in them).
///
/// On by default, with a delay of one second. Until this is called, the environment
/// variable `ARENAPOOL_IDLE_RETURN` sets the default, read once: `off`, or a delay
/// above 0 (`500`, `500ms` or `2s`).
///
/// What it covers: memory freed in jemalloc's own arenas, wherever and whenever it was
/// allocated (before a phase, outside every scope, on a library's threads), in
/// [`RawAlloc`](crate::RawAlloc)'s arenas outside phases, and what jemalloc left in
/// this crate's arenas that wait for work. It is given back by a thread of this crate's
/// (`arenapool-idle`), once the delay has passed with no quarter of it in which blocks
/// of 16 KiB or more adding up to 4 MiB were allocated, as [`trim`](crate::trim) would;
/// then the thread sleeps until the next such block is allocated or freed. A process
/// that works is not touched: the thread wakes four times per delay to look. Nor is one
/// that computes (a quarter of the delay in which it used half a CPU or more counts as
/// work), for up to 30 delays without a large block. One that
/// allocates less (a file's read buffer now and then) has what it freed given back
/// once per delay at most, and faults in again only the pages it then uses. Small objects that a thread's cache holds stay until that thread
/// allocates or flushes ([`flush_thread_cache`](crate::flush_thread_cache)): a few MiB
/// per thread at most in practice.
///
/// The thread starts with the process's first pool job, phase,
/// [`Arena`](crate::Arena), [`trim`](crate::trim), call of this function or of
/// [`idle_return`], or at the end of its first scope once a block of 16 KiB or more
/// has been allocated or freed. Until then there is none: a program that opens scopes
/// on small objects only keeps its one thread, whose mutexes the C library unlocks
/// without an atomic operation (a scope takes 82 of jemalloc's), and has what it frees
/// given back by jemalloc's decay as it allocates, or by `trim`.
///
/// The delay is counted in whole milliseconds, at least one.
pub fn set_idle_return(after: Option<Duration>) {
    let ms = match after {
        None => OFF,
        Some(delay) => u64::try_from(delay.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, UNCHOSEN - 1),
    };
    CHOSEN.store(ms, Ordering::Relaxed);
    // Makes the default first if it is not made yet (which keeps the choice just stored).
    start();
    if ms == OFF {
        NOTICE.store(NOTHING, Ordering::SeqCst);
    } else {
        run_thread();
    }
}

/// After how long without large allocations or frees the free memory of jemalloc's
/// arenas goes back (see [`set_idle_return`]); `None` when that is off, or its thread
/// could not be started.
pub fn idle_return() -> Option<Duration> {
    start();
    // Another thread may be making it: a few atomic stores away.
    while !MADE.load(Ordering::Acquire) {
        thread::yield_now();
    }
    delay().filter(|_| NOTICE.load(Ordering::SeqCst) != NOTHING)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_environment() {
        assert_eq!(parse("off"), Ok(OFF));
        assert_eq!(parse("1000"), Ok(1000));
        assert_eq!(parse("250ms"), Ok(250));
        assert_eq!(parse("2s"), Ok(2000));
        assert_eq!(parse(" 5 "), Ok(5));
        assert_eq!(parse("0"), Err(()));
        assert_eq!(parse("-5"), Err(()));
        assert_eq!(parse("soon"), Err(()));
        assert_eq!(parse(""), Err(()));
    }

    #[test]
    fn a_round_is_computed_through_from_half_a_cpu() {
        let round = Duration::from_millis(250);
        let at = |ms| Some(Duration::from_millis(ms));
        assert!(computes(at(1000), at(1125), round));
        assert!(computes(at(1000), at(1500), round)); // two threads busy
        assert!(!computes(at(1000), at(1124), round));
        assert!(!computes(at(1000), at(1000), round));
        assert!(!computes(None, at(2000), round));
        assert!(!computes(at(1000), None, round));
        // The clock reads on this machine, and grows as the process works.
        let before = process_cpu_time().expect("the process's CPU clock");
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(20) {
            std::hint::black_box(0);
        }
        assert!(process_cpu_time().expect("the process's CPU clock") > before);
    }
}
