//! Soak test: runs, for a given time, a random mix of everything a user of arenapool does
//! at once, on several threads, and checks every result, every panic and the RSS.
//!
//! ```sh
//! cargo run --release --example soak -- --minutes 30 --seed 42
//! ```
//!
//! Three caller threads each pick operations at random, with no pause between them:
//! nested `with_arena` scopes (some of which panic, caught at a random depth),
//! `with_arena_report`, a hand-made `Arena`, jobs on two pools (one of them with
//! `keep_warm`) with scopes inside tasks and calls between the pools both ways, reports,
//! jobs that panic, `map_stream` consumed whole, dropped early or panicking, consumed on
//! the calling thread, inside a scope, or on a worker of the other pool, phases around
//! work on a plain rayon pool of the soak's own (nested, inside a scope, panicking, or
//! ended on another thread), `trim()` and `memory()`. Half of the results escape into a shared bin, from which other callers
//! and a dropper thread free them later, on their own threads.
//!
//! Checks:
//! - Every block of data (results, scratch, shared state) is a pattern derived from its
//!   key; every one is read back in full before it is freed.
//! - Every panic raised is one the soak raised on purpose (a counting panic hook, which
//!   prints nothing, checks the payload); every panic that reaches a caller carries the
//!   payload of the operation it belongs to; after it, the caller is bound to no arena
//!   (or to the scope that caught it), and the next job on the pool runs.
//! - Between operations a caller is bound to no arena; when no operation runs, only the
//!   pools' arenas and the phase arenas (made before the run) are alive, and no phase is
//!   open. A phase's large blocks lie in arenas of arenapool's.
//! - Every few seconds the callers stop at a checkpoint (no scope, job or stream alive;
//!   each thread that freed results outside any scope has flushed its cache, as the
//!   docs tell such a thread to), and RSS must be below
//!   `baseline + live + workers x 8 MiB + slack`, where
//!   - `baseline` is the RSS with the pools built and every thread started;
//!   - `live` is the footprint of the results still in the bin: a whole page for each
//!     small allocation, and for a large one its jemalloc size class plus one page;
//!   - `workers x 8 MiB` is the bound on what a pool worker keeps in its thread cache
//!     between jobs (docs/design.md), for the pools' three workers and the plain pool's
//!     two;
//!   - `slack` (16 MiB) covers jemalloc's metadata (about 86 KiB per arena, at most
//!     about 20 arenas alive at once here), the pages that the soak's own small
//!     bookkeeping, freed outside any arena, leaves in jemalloc's automatic arenas
//!     (which return freed pages after about 10 s), and the threads' stacks and page
//!     tables.
//!
//!   Every fourth checkpoint the bin is emptied first, so `live` is 0.
//! - At the end the bin is emptied and the pools are dropped, and RSS must be below
//!   `baseline + slack`.
//! - A checkpoint that does not come within two minutes is a hang and fails the run.
//!
//! The seed fixes every caller's sequence of operations and every size, key and panic
//! site; the interleaving of the threads is the OS's. Exit status 0 means every check
//! passed, 1 that one failed (each failure is printed with the seed), 2 a bad argument.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use arenapool::{current_arena, with_arena, Arena, ArenaAlloc, ArenaPool, Bytes};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// Threads that pick operations at random.
const CALLERS: usize = 3;
/// Workers of the pool most jobs run on.
const POOL_A_THREADS: usize = 2;
/// Workers of the second pool, which keeps its pages warm between jobs.
const POOL_B_THREADS: usize = 1;
const KEEP_WARM: Duration = Duration::from_millis(100);
/// Workers of the plain rayon pool phases run their work on: threads arenapool does not
/// own.
const PLAIN_THREADS: usize = 2;
/// Threads whose caches the bound allows for: the pools' workers and the plain pool's.
const WORKERS: usize = POOL_A_THREADS + POOL_B_THREADS + PLAIN_THREADS;
/// What a pool worker may keep resident in its thread cache between jobs (docs/design.md).
const WORKER_CACHE: usize = 8 << 20;
/// The bin of escaped results holds at most this footprint, and this many results.
const BIN_BYTES: usize = 192 << 20;
const BIN_ITEMS: usize = 8192;
/// See the crate docs: arenas' metadata, automatic arenas' pages, threads.
const SLACK: usize = 16 << 20;
/// Far above anything the mix can hold at once: RSS above it is runaway growth, and the
/// run stops there rather than take the machine's memory.
const RUNAWAY: usize = 2 << 30;
/// A checkpoint later than this after the previous one means a thread is stuck.
const HANG: Duration = Duration::from_secs(120);
/// Every this many checkpoints, the bin is emptied before the RSS check.
const DRAIN_EVERY: u64 = 4;
const PAGE: usize = 4096;

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("soak: {message}\nusage: soak [--minutes N] [--seed S]");
            return ExitCode::from(2);
        }
    };
    println!(
        "soak: seed {} (rerun with --seed {}), {} min, {CALLERS} callers, pools of {POOL_A_THREADS} and {POOL_B_THREADS} threads",
        args.seed, args.seed, args.minutes
    );
    panic::set_hook(Box::new(count_panic));
    if !arenapool::is_installed() {
        fail(format_args!("ArenaAlloc is not the global allocator"));
        return finish(args.seed);
    }
    let soak = match Soak::new() {
        Ok(mut soak) => {
            soak.fixed_arenas = arenapool::live_arenas();
            soak
        }
        Err(e) => {
            fail(format_args!("building the pools and the phase arenas: {e}"));
            return finish(args.seed);
        }
    };
    let deadline = Duration::from_secs_f64(args.minutes * 60.0);
    let mut stats = Stats::default();
    thread::scope(|s| {
        for id in 0..CALLERS {
            let mut caller = Caller::new(&soak, args.seed, id);
            thread::Builder::new()
                .name(format!("soak-caller-{id}"))
                .spawn_scoped(s, move || caller.run())
                .expect("spawn a caller thread");
        }
        let mut dropper = Caller::new(&soak, args.seed, CALLERS);
        thread::Builder::new()
            .name("soak-dropper".into())
            .spawn_scoped(s, move || dropper.run_dropper())
            .expect("spawn the dropper thread");
        thread::Builder::new()
            .name("soak-monitor".into())
            .spawn_scoped(s, || soak.monitor())
            .expect("spawn the monitor thread");
        soak.coordinate(args.seed, deadline, &mut stats);
    });
    let ops = soak.ops();
    let high_water_sampled = soak.high_water.load(Ordering::Relaxed);
    let trimmed = soak.trimmed.load(Ordering::Relaxed);
    let lost_to_no_arena = soak.no_arena.load(Ordering::Relaxed);

    // The end: empty the bin, drop the pools; what is left is the baseline's.
    let drained = soak.bin.drain();
    drop(soak);
    let _ = arenapool::flush_thread_cache();
    let final_rss = arenapool::rss();
    let final_bound = stats.baseline + SLACK;
    if final_rss > final_bound {
        fail(format_args!(
            "RSS after dropping the pools and every result: {} > bound {} (baseline {} + slack {})",
            Bytes(final_rss),
            Bytes(final_bound),
            Bytes(stats.baseline),
            Bytes(SLACK)
        ));
    }
    if lost_to_no_arena > 0 {
        fail(format_args!(
            "{lost_to_no_arena} operations could not get an arena"
        ));
    }

    println!(
        "soak: ran {:.1} min, {} checkpoints",
        stats.elapsed.as_secs_f64() / 60.0,
        stats.checkpoints
    );
    let total: u64 = ops.iter().map(|(_, n)| n).sum();
    println!("operations: {total} in all");
    for (kind, n) in &ops {
        println!("  {:<16} {n:>9}", kind.name());
    }
    println!(
        "panics: {} raised on purpose, {} reached a caller as expected, {} unexpected",
        RAISED.load(Ordering::Relaxed),
        CAUGHT.load(Ordering::Relaxed),
        UNEXPECTED.load(Ordering::Relaxed)
    );
    println!(
        "results freed from the bin on other threads: {}; emptied at the end: {drained}; trim() gave back {}",
        soak_freed(),
        Bytes(trimmed)
    );
    println!(
        "RSS: baseline {}, high-water {} (sampled every 20 ms: {}), final {} (bound {})",
        Bytes(stats.baseline),
        Bytes(arenapool::peak_rss()),
        Bytes(high_water_sampled),
        Bytes(final_rss),
        Bytes(final_bound)
    );
    println!(
        "bound at checkpoints: baseline + live + {} workers x {} + slack {}",
        WORKERS,
        Bytes(WORKER_CACHE),
        Bytes(SLACK)
    );
    if let Some(worst) = &stats.worst {
        println!("worst margin: {worst}");
    }
    if let Some(worst) = &stats.worst_drained {
        println!("worst margin with the bin empty: {worst}");
    }
    println!(
        "largest live at a checkpoint: {}; largest RSS above baseline + live: {}",
        Bytes(stats.max_live),
        Bytes(stats.max_excess)
    );
    finish(args.seed)
}

/// `--minutes N` (fractions allowed) and `--seed S`.
struct Args {
    minutes: f64,
    seed: u64,
}

impl Args {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut parsed = Args {
            minutes: 3.0,
            seed: fastrand::u64(..),
        };
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--minutes" => {
                    let v = value()?;
                    parsed.minutes = v
                        .parse()
                        .ok()
                        .filter(|m: &f64| m.is_finite() && *m > 0.0)
                        .ok_or(format!("--minutes {v}: not a positive number"))?;
                }
                "--seed" => {
                    let v = value()?;
                    parsed.seed = v.parse().map_err(|_| format!("--seed {v}: not a u64"))?;
                }
                _ => return Err(format!("unknown argument {arg}")),
            }
        }
        Ok(parsed)
    }
}

// ---------------------------------------------------------------------------------------
// Failures and panics

static FAILED: AtomicUsize = AtomicUsize::new(0);
static RAISED: AtomicU64 = AtomicU64::new(0);
static CAUGHT: AtomicU64 = AtomicU64::new(0);
static UNEXPECTED: AtomicU64 = AtomicU64::new(0);
static FREED_FROM_BIN: AtomicU64 = AtomicU64::new(0);

fn soak_freed() -> u64 {
    FREED_FROM_BIN.load(Ordering::Relaxed)
}

/// Records a failed check: printed at once; the run stops at the next checkpoint and
/// exits with status 1.
fn fail(message: fmt::Arguments<'_>) {
    let n = FAILED.fetch_add(1, Ordering::Relaxed);
    if n < 20 {
        eprintln!(
            "soak: FAIL [{}]: {message}",
            thread::current().name().unwrap_or("?")
        );
    }
}

fn failed() -> bool {
    FAILED.load(Ordering::Relaxed) > 0
}

fn finish(seed: u64) -> ExitCode {
    let n = FAILED.load(Ordering::Relaxed);
    if n == 0 {
        println!("soak: ok");
        ExitCode::SUCCESS
    } else {
        println!("soak: FAILED ({n} failed checks); reproduce with --seed {seed}");
        ExitCode::FAILURE
    }
}

/// The payload of every panic the soak raises on purpose: the key of the operation.
#[derive(Debug, PartialEq, Eq)]
struct Expected(u64);

fn raise(key: u64) -> ! {
    panic::panic_any(Expected(key))
}

/// The panic hook: counts the expected panics and prints nothing for them (a backtrace
/// symbolised under `RUST_BACKTRACE` would keep tens of MiB for good); any other panic
/// is a failure.
fn count_panic(info: &panic::PanicHookInfo<'_>) {
    if info.payload().downcast_ref::<Expected>().is_some() {
        RAISED.fetch_add(1, Ordering::Relaxed);
    } else {
        UNEXPECTED.fetch_add(1, Ordering::Relaxed);
        fail(format_args!("unexpected panic: {info}"));
    }
}

/// Checks that `result` is the expected panic of operation `key`.
fn expect_panic<R>(result: thread::Result<R>, key: u64, what: &str) {
    match result {
        Ok(_) => fail(format_args!(
            "{what} (key {key:#x}): no panic reached the caller"
        )),
        Err(payload) => match payload.downcast_ref::<Expected>() {
            Some(Expected(k)) if *k == key => {
                CAUGHT.fetch_add(1, Ordering::Relaxed);
            }
            Some(Expected(k)) => fail(format_args!(
                "{what} (key {key:#x}): the panic of operation {k:#x} arrived instead"
            )),
            None => fail(format_args!(
                "{what} (key {key:#x}): a panic of another kind"
            )),
        },
    }
}

fn expect_arena(what: &str, want: Option<u32>) {
    let got = current_arena();
    if got != want {
        fail(format_args!(
            "{what}: the thread is bound to arena {got:?}, expected {want:?}"
        ));
    }
}

// ---------------------------------------------------------------------------------------
// Data: blocks whose every word is derived from their key

/// A block of data whose content, length and label all follow from its key, so that it
/// can be checked wherever it ends up.
struct Block {
    key: u64,
    data: Vec<u64>,
    label: String,
}

/// SplitMix64's finaliser: a key for part `n` of the work of `key`.
fn mix(key: u64, n: u64) -> u64 {
    let mut z = key ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Sizes from 8 bytes to 2 MiB: small objects, the thread caches' large classes, and
/// large blocks.
fn block_words(key: u64) -> usize {
    const WORDS: [usize; 16] = [
        1, 3, 12, 60, 250, 700, 1_500, 2_048, 4_000, 9_000, 20_000, 50_000, 65_536, 120_000,
        200_000, 262_144,
    ];
    WORDS[(key & 15) as usize]
}

fn word(key: u64, i: usize) -> u64 {
    (key ^ (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)).rotate_left((i % 63) as u32)
}

/// `blk:` and the key in 16 hex digits.
fn label_of(key: u64) -> [u8; 20] {
    let mut label = *b"blk:0000000000000000";
    for (i, byte) in label[4..].iter_mut().enumerate() {
        let nibble = (key >> (60 - 4 * i)) & 15;
        *byte = b"0123456789abcdef"[nibble as usize];
    }
    label
}

impl Block {
    fn new(key: u64) -> Block {
        let label = label_of(key);
        Block {
            key,
            data: (0..block_words(key)).map(|i| word(key, i)).collect(),
            label: std::str::from_utf8(&label).unwrap_or_default().to_owned(),
        }
    }

    /// Reads the block back in full.
    fn check(&self, key: u64, what: &str) -> bool {
        let error = if self.key != key {
            Some(format!("key {:#x}", self.key))
        } else if self.data.len() != block_words(key) {
            Some(format!(
                "{} words, not {}",
                self.data.len(),
                block_words(key)
            ))
        } else if let Some((i, x)) =
            (self.data.iter().enumerate()).find(|&(i, &x)| x != word(key, i))
        {
            Some(format!("word {i} is {x:#x}, not {:#x}", word(key, i)))
        } else if self.label.as_bytes() != &label_of(key)[..] {
            Some(format!("label {:?}", self.label))
        } else {
            None
        };
        if let Some(error) = &error {
            fail(format_args!("{what}: block {key:#x} corrupt: {error}"));
        }
        error.is_none()
    }

    /// What the block can keep resident: a whole page for each small allocation (up to
    /// 14 KiB: one live object keeps its page), and for a large one its jemalloc size
    /// class (four per doubling) plus the page jemalloc adds to offset large blocks.
    fn footprint(&self) -> usize {
        fn one(bytes: usize) -> usize {
            match bytes {
                0 => 0,
                b if b <= 14 << 10 => PAGE,
                b => {
                    // b in (2^k, 2^(k+1)]: classes are 2^(k-2) apart.
                    let k = usize::BITS - 1 - (b - 1).leading_zeros();
                    b.next_multiple_of(1 << (k - 2)) + PAGE
                }
            }
        }
        one(self.data.capacity() * 8) + one(self.label.capacity())
    }
}

/// Scratch work: `rounds` blocks made, checked and freed in a scrambled order, at most
/// three alive at once.
fn churn(key: u64, rounds: u64) {
    let mut live: [Option<Block>; 3] = [None, None, None];
    for r in 0..rounds {
        let k = mix(key, r);
        let slot = (k >> 8) as usize % live.len();
        if let Some(old) = live[slot].take() {
            old.check(old.key, "scratch");
        }
        live[slot] = Some(Block::new(k));
    }
    for block in live.iter().flatten() {
        block.check(block.key, "scratch");
    }
}

// ---------------------------------------------------------------------------------------
// The bin: results that escaped their scope or job, freed later on other threads

struct Bin {
    inner: Mutex<BinInner>,
}

struct BinInner {
    blocks: VecDeque<Block>,
    bytes: usize,
}

impl Bin {
    fn new() -> Bin {
        Bin {
            inner: Mutex::new(BinInner {
                blocks: VecDeque::with_capacity(BIN_ITEMS),
                bytes: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BinInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `block`, first freeing the oldest blocks (on this thread) if it would not fit.
    fn put(&self, block: Block) {
        let size = block.footprint();
        loop {
            let oldest = {
                let mut inner = self.lock();
                if inner.bytes + size <= BIN_BYTES && inner.blocks.len() < BIN_ITEMS {
                    inner.bytes += size;
                    inner.blocks.push_back(block);
                    return;
                }
                inner.take(0)
            };
            free(oldest);
        }
    }

    /// Takes the block at a random place, if any.
    fn take(&self, rng: &mut fastrand::Rng) -> Option<Block> {
        let mut inner = self.lock();
        let n = inner.blocks.len();
        if n == 0 {
            return None;
        }
        inner.take(rng.usize(..n))
    }

    /// The footprint of what the bin holds.
    fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Frees every block, checking each; returns how many there were.
    fn drain(&self) -> usize {
        let mut n = 0;
        loop {
            let block = self.lock().take(0);
            match block {
                Some(block) => free(Some(block)),
                None => return n,
            }
            n += 1;
        }
    }
}

impl BinInner {
    fn take(&mut self, at: usize) -> Option<Block> {
        let block = self.blocks.swap_remove_back(at)?;
        self.bytes -= block.footprint();
        Some(block)
    }
}

/// Checks a block from the bin and frees it on this thread.
fn free(block: Option<Block>) {
    if let Some(block) = block {
        block.check(block.key, "escaped result");
        FREED_FROM_BIN.fetch_add(1, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// The operations

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Scope,
    ScopePanic,
    ScopeReport,
    ManualArena,
    Job,
    JobReport,
    JobPanic,
    CrossPool,
    Stream,
    StreamEarlyDrop,
    StreamPanic,
    Phase,
    PhasePanic,
    Free,
    Trim,
    Memory,
}

impl Kind {
    const ALL: [Kind; 16] = [
        Kind::Scope,
        Kind::ScopePanic,
        Kind::ScopeReport,
        Kind::ManualArena,
        Kind::Job,
        Kind::JobReport,
        Kind::JobPanic,
        Kind::CrossPool,
        Kind::Stream,
        Kind::StreamEarlyDrop,
        Kind::StreamPanic,
        Kind::Phase,
        Kind::PhasePanic,
        Kind::Free,
        Kind::Trim,
        Kind::Memory,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Scope => "scope",
            Kind::ScopePanic => "scope_panic",
            Kind::ScopeReport => "scope_report",
            Kind::ManualArena => "manual_arena",
            Kind::Job => "job",
            Kind::JobReport => "job_report",
            Kind::JobPanic => "job_panic",
            Kind::CrossPool => "cross_pool",
            Kind::Stream => "stream",
            Kind::StreamEarlyDrop => "stream_early_drop",
            Kind::StreamPanic => "stream_panic",
            Kind::Phase => "phase",
            Kind::PhasePanic => "phase_panic",
            Kind::Free => "free_escaped",
            Kind::Trim => "trim",
            Kind::Memory => "memory",
        }
    }

    /// How often each kind is picked, relative to the others.
    fn weight(self) -> usize {
        match self {
            Kind::Scope => 12,
            Kind::ScopePanic => 5,
            Kind::ScopeReport => 4,
            Kind::ManualArena => 4,
            Kind::Job => 14,
            Kind::JobReport => 5,
            Kind::JobPanic => 4,
            Kind::CrossPool => 5,
            Kind::Stream => 6,
            Kind::StreamEarlyDrop => 5,
            Kind::StreamPanic => 4,
            Kind::Phase => 8,
            Kind::PhasePanic => 3,
            Kind::Free => 6,
            Kind::Trim => 2,
            Kind::Memory => 3,
        }
    }

    fn pick(rng: &mut fastrand::Rng) -> Kind {
        let total: usize = Kind::ALL.iter().map(|k| k.weight()).sum();
        let mut n = rng.usize(..total);
        for kind in Kind::ALL {
            if n < kind.weight() {
                return kind;
            }
            n -= kind.weight();
        }
        unreachable!("weights sum to total")
    }
}

/// What the threads share.
struct Soak {
    a: Arc<ArenaPool>,
    b: Arc<ArenaPool>,
    /// A plain rayon pool: threads arenapool does not own, on which phases run work.
    plain: rayon::ThreadPool,
    /// The arenas alive with no work running: the pools' and the phase arenas.
    fixed_arenas: usize,
    bin: Bin,
    ops: [AtomicU64; Kind::ALL.len()],
    /// The callers are to stop at the next checkpoint.
    checkpoint: AtomicBool,
    /// The run is over: threads leave at the next release.
    stop: AtomicBool,
    barrier: Barrier,
    /// Set by the coordinator at each checkpoint, read by the monitor's hang check.
    last_checkpoint: Mutex<Instant>,
    high_water: AtomicUsize,
    trimmed: AtomicUsize,
    /// Operations that ran without an arena (none should).
    no_arena: AtomicU64,
    /// What each caller is doing, for the report of a hang.
    doing: [Doing; CALLERS],
    started: Instant,
}

/// The operation a caller runs: its kind plus one (0: none), key, and start in
/// milliseconds since the soak started.
#[derive(Default)]
struct Doing {
    kind: AtomicUsize,
    key: AtomicU64,
    since: AtomicU64,
}

impl Soak {
    fn new() -> Result<Soak, String> {
        let plain = rayon::ThreadPoolBuilder::new()
            .num_threads(PLAIN_THREADS)
            .thread_name(|i| format!("soak-plain-{i}"))
            .build()
            .map_err(|e| e.to_string())?;
        // The first phase makes the phase arenas, kept for the process's life.
        arenapool::try_phase(|| ()).map_err(|e| e.to_string())?;
        Ok(Soak {
            a: Arc::new(
                ArenaPool::builder()
                    .num_threads(POOL_A_THREADS)
                    .thread_name(|i| format!("soak-a-{i}"))
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            b: Arc::new(
                ArenaPool::builder()
                    .num_threads(POOL_B_THREADS)
                    .thread_name(|i| format!("soak-b-{i}"))
                    .keep_warm(KEEP_WARM)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
            plain,
            fixed_arenas: 0,
            bin: Bin::new(),
            ops: Default::default(),
            checkpoint: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            // The callers, the dropper and the coordinator.
            barrier: Barrier::new(CALLERS + 2),
            last_checkpoint: Mutex::new(Instant::now()),
            high_water: AtomicUsize::new(0),
            trimmed: AtomicUsize::new(0),
            no_arena: AtomicU64::new(0),
            doing: Default::default(),
            started: Instant::now(),
        })
    }

    fn ops(&self) -> Vec<(Kind, u64)> {
        Kind::ALL
            .iter()
            .map(|&k| (k, self.ops[k as usize].load(Ordering::Relaxed)))
            .collect()
    }

    fn pool(&self, rng: &mut fastrand::Rng) -> &ArenaPool {
        if rng.usize(..3) == 0 {
            &self.b
        } else {
            &self.a
        }
    }

    /// The main thread: starts and ends epochs of random operations, and checks RSS at
    /// each checkpoint between them.
    fn coordinate(&self, seed: u64, deadline: Duration, stats: &mut Stats) {
        let mut rng = fastrand::Rng::with_seed(mix(seed, u64::MAX));
        stats.baseline = arenapool::rss();
        let started = Instant::now();
        let mut last_progress = started;
        loop {
            self.checkpoint.store(false, Ordering::SeqCst);
            let over = started.elapsed() >= deadline || failed();
            self.stop.store(over, Ordering::SeqCst);
            self.barrier.wait(); // release the threads (or let them leave)
            if over {
                break;
            }
            let epoch_end = Instant::now() + Duration::from_millis(rng.u64(1000..3000));
            while Instant::now() < epoch_end && !failed() {
                thread::sleep(Duration::from_millis(20));
            }
            self.checkpoint.store(true, Ordering::SeqCst);
            self.barrier.wait(); // every thread is at the checkpoint
            stats.checkpoints += 1;
            self.check_quiescent(stats);
            *self
                .last_checkpoint
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Instant::now();
            if last_progress.elapsed() >= Duration::from_secs(60) {
                last_progress = Instant::now();
                let ops: u64 = self.ops().iter().map(|(_, n)| n).sum();
                println!(
                    "soak: {:5.1} min, {} checkpoints, {ops} operations, RSS {}, worst margin {:.1} MiB",
                    started.elapsed().as_secs_f64() / 60.0,
                    stats.checkpoints,
                    Bytes(arenapool::rss()),
                    stats.worst.as_ref().map_or(0, Sample::margin) as f64 / (1 << 20) as f64
                );
            }
        }
        stats.elapsed = started.elapsed();
    }

    /// No scope, job or stream is alive: only the pools' arenas exist, and RSS is within
    /// the bound.
    fn check_quiescent(&self, stats: &mut Stats) {
        let live_arenas = arenapool::live_arenas();
        if live_arenas != self.fixed_arenas {
            fail(format_args!(
                "checkpoint {}: {live_arenas} arenas alive with no work running, expected the pools' and the phase arenas' {}",
                stats.checkpoints, self.fixed_arenas
            ));
        }
        if arenapool::phase_is_open() {
            fail(format_args!(
                "checkpoint {}: a phase is open with no work running",
                stats.checkpoints
            ));
        }
        // The keep-warm pool gives its pages back once idle for KEEP_WARM.
        thread::sleep(KEEP_WARM * 3);
        // Nothing allocates now: jemalloc's totals must be consistent.
        let m = arenapool::memory();
        if m.allocated == 0 || m.allocated > m.active || m.active > m.mapped {
            fail(format_args!(
                "checkpoint {}: memory() inconsistent with no work running: {m:?}",
                stats.checkpoints
            ));
        }
        let drained = stats.checkpoints % DRAIN_EVERY == 0;
        if drained {
            self.bin.drain();
        }
        let _ = arenapool::flush_thread_cache();
        let live = self.bin.bytes();
        let rss = arenapool::rss();
        let sample = Sample {
            checkpoint: stats.checkpoints,
            rss,
            live,
            bound: stats.baseline + live + WORKERS * WORKER_CACHE + SLACK,
        };
        if rss > sample.bound {
            fail(format_args!("RSS above the bound: {sample}"));
        }
        stats.max_live = stats.max_live.max(live);
        stats.max_excess = stats
            .max_excess
            .max(rss.saturating_sub(stats.baseline + live));
        let worst = if drained {
            &mut stats.worst_drained
        } else {
            &mut stats.worst
        };
        if worst.as_ref().is_none_or(|w| sample.margin() < w.margin()) {
            *worst = Some(sample);
        }
    }

    fn millis(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// What each caller is doing: for the report of a hang.
    fn callers_doing(&self) -> String {
        let now = self.millis();
        let mut out = String::new();
        for (id, doing) in self.doing.iter().enumerate() {
            let kind = doing.kind.load(Ordering::SeqCst);
            let key = doing.key.load(Ordering::SeqCst);
            let secs = now.saturating_sub(doing.since.load(Ordering::SeqCst)) as f64 / 1000.0;
            let what = match Kind::ALL.get(kind.wrapping_sub(1)) {
                Some(kind) => format!("in {} (key {key:#x}) for {secs:.1} s", kind.name()),
                None => format!("between operations or at the checkpoint for {secs:.1} s"),
            };
            out += &format!("caller {id} {what}; ");
        }
        out
    }

    /// Samples RSS for the high-water mark, stops runaway growth, and fails a run whose
    /// checkpoints stop coming.
    fn monitor(&self) {
        let mut warned = false;
        loop {
            let rss = arenapool::rss();
            self.high_water.fetch_max(rss, Ordering::Relaxed);
            if rss > RUNAWAY {
                fail(format_args!(
                    "RSS {} above {}: runaway growth",
                    Bytes(rss),
                    Bytes(RUNAWAY)
                ));
                std::process::exit(1);
            }
            let since = self
                .last_checkpoint
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .elapsed();
            if since > HANG {
                fail(format_args!(
                    "no checkpoint for {since:.1?}: a thread is stuck; {}",
                    self.callers_doing()
                ));
                std::process::exit(1);
            }
            if since > HANG / 2 && !warned {
                eprintln!(
                    "soak: no checkpoint for {since:.1?}; {}",
                    self.callers_doing()
                );
            }
            warned = since > HANG / 2;
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

#[derive(Default)]
struct Stats {
    baseline: usize,
    checkpoints: u64,
    elapsed: Duration,
    worst: Option<Sample>,
    worst_drained: Option<Sample>,
    max_excess: usize,
    max_live: usize,
}

/// RSS at one checkpoint, against its bound.
struct Sample {
    checkpoint: u64,
    rss: usize,
    live: usize,
    bound: usize,
}

impl Sample {
    fn margin(&self) -> isize {
        self.bound as isize - self.rss as isize
    }
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.1} MiB (checkpoint {}: RSS {}, live {}, bound {})",
            self.margin() as f64 / (1 << 20) as f64,
            self.checkpoint,
            Bytes(self.rss),
            Bytes(self.live),
            Bytes(self.bound)
        )
    }
}

/// One thread picking operations.
struct Caller<'s> {
    soak: &'s Soak,
    id: usize,
    rng: fastrand::Rng,
}

impl<'s> Caller<'s> {
    fn new(soak: &'s Soak, seed: u64, id: usize) -> Caller<'s> {
        Caller {
            soak,
            id,
            rng: fastrand::Rng::with_seed(mix(seed, id as u64)),
        }
    }

    /// Runs epochs of operations until the coordinator says stop.
    fn run(&mut self) {
        self.epochs(|caller| {
            let kind = Kind::pick(&mut caller.rng);
            let key = caller.rng.u64(..);
            let doing = &caller.soak.doing[caller.id];
            doing.key.store(key, Ordering::SeqCst);
            doing.since.store(caller.soak.millis(), Ordering::SeqCst);
            doing.kind.store(kind as usize + 1, Ordering::SeqCst);
            let done = panic::catch_unwind(AssertUnwindSafe(|| caller.op(kind, key)));
            doing.since.store(caller.soak.millis(), Ordering::SeqCst);
            doing.kind.store(0, Ordering::SeqCst);
            if done.is_err() {
                // The hook has recorded it if it was not one of ours.
                fail(format_args!(
                    "{} (key {key:#x}): a panic escaped",
                    kind.name()
                ));
            }
            expect_arena(kind.name(), None);
            caller.soak.ops[kind as usize].fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Frees escaped results at random moments, on a thread that made none of them.
    fn run_dropper(&mut self) {
        self.epochs(|caller| {
            free(caller.soak.bin.take(&mut caller.rng));
            thread::sleep(Duration::from_millis(caller.rng.u64(10..60)));
        });
    }

    fn epochs(&mut self, mut step: impl FnMut(&mut Self)) {
        loop {
            self.soak.barrier.wait(); // released
            if self.soak.stop.load(Ordering::SeqCst) {
                return;
            }
            while !self.soak.checkpoint.load(Ordering::SeqCst) {
                step(self);
            }
            // Small results this thread freed sit in its cache until it flushes.
            let _ = arenapool::flush_thread_cache();
            self.soak.barrier.wait(); // at the checkpoint
        }
    }

    /// Half of the results escape into the bin; the others are freed here, now.
    fn keep_or_free(&mut self, block: Block) {
        if self.rng.bool() {
            self.soak.bin.put(block);
        }
    }

    fn op(&mut self, kind: Kind, key: u64) {
        match kind {
            Kind::Scope => self.scope(key),
            Kind::ScopePanic => self.scope_panic(key),
            Kind::ScopeReport => self.scope_report(key),
            Kind::ManualArena => self.manual_arena(key),
            Kind::Job => self.job(key),
            Kind::JobReport => self.job_report(key),
            Kind::JobPanic => self.job_panic(key),
            Kind::CrossPool => self.cross_pool(key),
            Kind::Stream => self.stream(key, None, None),
            Kind::StreamEarlyDrop => {
                let n = self.rng.usize(2..40);
                let stop_after = self.rng.usize(0..n);
                self.stream(key, Some(n), Some(stop_after));
            }
            Kind::StreamPanic => {
                let n = self.rng.usize(1..40);
                let at = self.rng.usize(0..n);
                self.stream_panic(key, n, at);
            }
            Kind::Phase => self.phase(key),
            Kind::PhasePanic => self.phase_panic(key),
            Kind::Free => {
                for _ in 0..self.rng.usize(1..5) {
                    free(self.soak.bin.take(&mut self.rng));
                }
            }
            Kind::Trim => match arenapool::trim() {
                Ok(bytes) => {
                    self.soak.trimmed.fetch_add(bytes, Ordering::Relaxed);
                }
                Err(e) => fail(format_args!("trim: {e}")),
            },
            Kind::Memory => {
                // While other threads allocate, jemalloc's totals are summed arena by
                // arena and need not agree with each other (allocated was seen 366 KiB
                // above active); `check_quiescent` checks how they relate.
                let m = arenapool::memory();
                if m.rss == 0 || m.allocated == 0 || m.active == 0 || m.mapped == 0 {
                    fail(format_args!("memory(): missing figures: {m:?}"));
                }
            }
        }
    }

    /// Nested scopes, each with scratch work and a result that escapes it.
    fn scope(&mut self, key: u64) {
        let depth = self.rng.usize(1..4);
        let blocks = with_arena(|| nested_scopes(key, 0, depth));
        for (n, block) in blocks.into_iter().enumerate() {
            if block.check(mix(key, n as u64), "scope result") {
                self.keep_or_free(block);
            }
        }
    }

    /// Nested scopes, the innermost of which panics; the panic is caught outside the
    /// scope at a random depth, which must then be bound where it was.
    fn scope_panic(&mut self, key: u64) {
        let depth = self.rng.usize(1..4);
        let catch_at = self.rng.usize(0..depth);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            panicking_scopes(key, 0, depth, catch_at)
        }));
        if catch_at == 0 {
            expect_panic(result, key, "scope_panic");
        } else if let Ok(block) = result {
            if block.check(mix(key, 0), "scope_panic result") {
                self.keep_or_free(block);
            }
        }
    }

    /// `with_arena_report`: the scratch freed inside is given back at the end.
    fn scope_report(&mut self, key: u64) {
        let scratch_words = self.rng.usize(256 << 10..1 << 20);
        let (block, report) = arenapool::with_arena_report(|| {
            let block = Block::new(key);
            let scratch: Vec<u64> = (0..scratch_words).map(|i| word(key, i)).collect();
            if scratch.iter().enumerate().any(|(i, &x)| x != word(key, i)) {
                fail(format_args!("scope_report: scratch corrupt"));
            }
            block
        });
        if report.arenas.len() != 1 {
            fail(format_args!("scope_report: arenas {:?}", report.arenas));
        }
        let scratch_bytes = scratch_words * 8;
        if report.returned < scratch_bytes * 3 / 4 {
            fail(format_args!(
                "scope_report: gave back {} of {} of freed scratch: {report}",
                Bytes(report.returned),
                Bytes(scratch_bytes)
            ));
        }
        if block.check(key, "scope_report result") {
            self.keep_or_free(block);
        }
    }

    /// An `Arena` used by hand: entered, bound, purged, dropped while its results live.
    fn manual_arena(&mut self, key: u64) {
        let arena = match Arena::new() {
            Ok(arena) => arena,
            Err(e) => {
                fail(format_args!("Arena::new: {e}"));
                return;
            }
        };
        let first = arena.enter(|| {
            expect_arena("Arena::enter", Some(arena.index()));
            churn(key, 6);
            Block::new(mix(key, 0))
        });
        let second = {
            let _binding = arena.bind();
            expect_arena("Arena::bind", Some(arena.index()));
            churn(mix(key, 7), 6);
            Block::new(mix(key, 1))
        };
        if let Err(e) = arena.purge() {
            fail(format_args!("Arena::purge: {e}"));
        }
        drop(arena);
        for (n, block) in [first, second].into_iter().enumerate() {
            if block.check(mix(key, n as u64), "manual arena result") {
                self.keep_or_free(block);
            }
        }
    }

    /// A job on a pool: tasks with scratch work, some with a scope of their own, some
    /// with `join`; every task checks it allocates from the pool's arenas.
    fn job(&mut self, key: u64) {
        let pool = self.soak.pool(&mut self.rng);
        let tasks = self.rng.usize(1..17);
        let in_scope = self.rng.usize(..4) == 0;
        let arenas = pool.arena_indices();
        let run = || pool.run(|| pool_tasks(key, tasks, &arenas));
        let blocks = if in_scope { with_arena(run) } else { run() };
        self.check_results(key, blocks, tasks, "job result");
    }

    /// `run_with_report`: the report names the pool's arenas.
    fn job_report(&mut self, key: u64) {
        let pool = self.soak.pool(&mut self.rng);
        let tasks = self.rng.usize(1..17);
        let arenas = pool.arena_indices();
        let (blocks, report) = pool.run_with_report(|| pool_tasks(key, tasks, &arenas));
        if report.arenas != arenas {
            fail(format_args!(
                "job_report: arenas {:?}, the pool's are {arenas:?}",
                report.arenas
            ));
        }
        self.check_results(key, blocks, tasks, "job_report result");
    }

    /// A job in which one task (or the job's closure itself) panics; the pool must run
    /// the next job.
    fn job_panic(&mut self, key: u64) {
        let pool = self.soak.pool(&mut self.rng);
        let tasks = self.rng.usize(1..17);
        let at = self.rng.usize(0..=tasks); // `tasks`: the closure, after its tasks
        let arenas = pool.arena_indices();
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(|| {
                let blocks: Vec<Block> = (0..tasks)
                    .into_par_iter()
                    .map(|i| {
                        let block = pool_task(key, i, &arenas);
                        if i == at {
                            raise(key);
                        }
                        block
                    })
                    .collect();
                if at == tasks {
                    raise(key);
                }
                blocks
            })
        }));
        expect_panic(result, key, "job_panic");
        expect_arena("after job_panic", None);
        if pool.run(|| rayon::join(|| 20, || 22)) != (20, 22) {
            fail(format_args!("job_panic: the next job gave a wrong result"));
        }
    }

    /// Calls between the two pools, either way: one pool's tasks run jobs on the other
    /// (a worker of one pool waiting on another), or one pool's worker consumes a
    /// stream on the other, whose tasks may run jobs back on the consumer's pool (the
    /// consumer, waiting for them, must run those jobs: pool B has one worker).
    fn cross_pool(&mut self, key: u64) {
        let (outer, inner) = if self.rng.bool() {
            (&self.soak.b, &self.soak.a)
        } else {
            (&self.soak.a, &self.soak.b)
        };
        let arenas = inner.arena_indices();
        if self.rng.bool() {
            let tasks = self.rng.usize(1..9);
            let blocks: Vec<Block> = outer.run(|| {
                (0..tasks)
                    .into_par_iter()
                    .map(|i| inner.run(|| pool_task(key, i, &arenas)))
                    .collect()
            });
            self.check_results(key, blocks, tasks, "cross_pool result");
        } else {
            let n = self.rng.usize(1..24);
            let call_back = self.rng.bool();
            let (back, back_arenas) = (Arc::clone(outer), outer.arena_indices());
            let blocks: Vec<Block> = outer.run(|| {
                inner
                    .map_stream(0..n, move |i| {
                        if call_back {
                            back.run(|| pool_task(key, i, &back_arenas))
                        } else {
                            pool_task(key, i, &arenas)
                        }
                    })
                    .collect()
            });
            self.check_results(key, blocks, n, "cross_pool stream result");
        }
    }

    /// `map_stream` over `n` inputs with state shared by every task, consumed in order
    /// on this thread (inside a scope, sometimes); dropped after `stop_after` results
    /// when set.
    fn stream(&mut self, key: u64, n: Option<usize>, stop_after: Option<usize>) {
        let pool = self.soak.pool(&mut self.rng);
        let n = n.unwrap_or_else(|| self.rng.usize(1..40));
        let in_scope = self.rng.usize(..4) == 0;
        let state_key = mix(key, u64::MAX);
        let state = with_arena(|| Arc::new(Block::new(state_key)));
        let arenas = pool.arena_indices();
        let consume = || {
            let stream = pool.map_stream(0..n, move |i| {
                check_state(&state, state_key, i);
                pool_task(key, i, &arenas)
            });
            let mut got = Vec::new();
            for (i, block) in stream.enumerate() {
                let good = block.check(mix(key, i as u64), "stream result");
                if Some(i) == stop_after {
                    break; // drops the stream with results in flight
                }
                if good {
                    got.push(block);
                }
            }
            got
        };
        let blocks = if in_scope {
            with_arena(consume)
        } else {
            consume()
        };
        let want = stop_after.unwrap_or(n);
        if blocks.len() != want {
            fail(format_args!(
                "stream (key {key:#x}): {} results, expected {want}",
                blocks.len()
            ));
        }
        for block in blocks {
            self.keep_or_free(block);
        }
    }

    /// `map_stream` whose task `at` panics: the results before it arrive in order, the
    /// panic arrives in its place, and nothing after it.
    fn stream_panic(&mut self, key: u64, n: usize, at: usize) {
        let pool = self.soak.pool(&mut self.rng);
        let arenas = pool.arena_indices();
        let mut stream = pool.map_stream(0..n, move |i| {
            let block = pool_task(key, i, &arenas);
            if i == at {
                raise(key);
            }
            block
        });
        for i in 0..at {
            match stream.next() {
                Some(block) => {
                    if block.check(mix(key, i as u64), "stream_panic result") {
                        self.keep_or_free(block);
                    }
                }
                None => fail(format_args!("stream_panic: ended at {i}, before {at}")),
            }
        }
        let result = panic::catch_unwind(AssertUnwindSafe(|| stream.next()));
        expect_panic(result, key, "stream_panic");
        if stream.next().is_some() {
            fail(format_args!("stream_panic: a result after the panic"));
        }
        drop(stream);
        expect_arena("after stream_panic", None);
    }

    /// A phase around work on the plain pool: tasks with scratch work, whose results'
    /// large blocks must lie in arenas of arenapool's. The phase is opened around the
    /// work, nested in another, inside a scope of the caller's, or held by a guard that
    /// a worker of the plain pool drops.
    fn phase(&mut self, key: u64) {
        let tasks = self.rng.usize(1..17);
        let plain = &self.soak.plain;
        let work = || plain.install(|| phase_tasks(key, tasks, None));
        let blocks = match self.rng.usize(..4) {
            0 => arenapool::phase(|| arenapool::phase(work)),
            1 => with_arena(|| arenapool::phase(work)),
            2 => {
                let guard = arenapool::enter_phase();
                let blocks = work();
                plain.install(move || drop(guard));
                blocks
            }
            _ => arenapool::phase(work),
        };
        self.check_results(key, blocks, tasks, "phase result");
    }

    /// A phase in which one task (or the phase's closure itself) panics: the panic
    /// reaches the caller, and the next phase runs.
    fn phase_panic(&mut self, key: u64) {
        let tasks = self.rng.usize(1..17);
        let at = self.rng.usize(0..=tasks); // `tasks`: the closure, after its tasks
        let plain = &self.soak.plain;
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            arenapool::phase(|| {
                let blocks = plain.install(|| phase_tasks(key, tasks, Some(at)));
                if at == tasks {
                    raise(key);
                }
                blocks
            })
        }));
        expect_panic(result, key, "phase_panic");
        let next = arenapool::phase(|| plain.install(|| phase_tasks(mix(key, 1), 1, None)));
        self.check_results(mix(key, 1), next, 1, "phase result after a panic");
    }

    fn check_results(&mut self, key: u64, blocks: Vec<Block>, n: usize, what: &str) {
        if blocks.len() != n {
            fail(format_args!(
                "{what} (key {key:#x}): {} results, expected {n}",
                blocks.len()
            ));
        }
        for (i, block) in blocks.into_iter().enumerate() {
            if block.check(mix(key, i as u64), what) {
                self.keep_or_free(block);
            }
        }
    }
}

/// Scope `level` of `Caller::scope`'s `depth` nested scopes: it makes result `level`,
/// does scratch work, and opens the next scope, whose results escape into this one.
fn nested_scopes(key: u64, level: usize, depth: usize) -> Vec<Block> {
    let here = current_arena();
    if here.is_none() {
        fail(format_args!("with_arena ran without an arena"));
    }
    let mut out = vec![Block::new(mix(key, level as u64))];
    churn(mix(key, 1000 + level as u64), 8);
    if level + 1 < depth {
        let inner = with_arena(|| {
            if current_arena() == here {
                fail(format_args!(
                    "a nested scope got its parent's arena {here:?}"
                ));
            }
            nested_scopes(key, level + 1, depth)
        });
        expect_arena("after a nested scope", here);
        out.extend(inner);
    }
    out
}

/// Scope `level` of `depth` nested scopes; the innermost panics. The scope at
/// `catch_at` is run under `catch_unwind` by its parent, which must find itself bound to
/// its own arena afterwards and return a result.
fn panicking_scopes(key: u64, level: usize, depth: usize, catch_at: usize) -> Block {
    with_arena(|| {
        let here = current_arena();
        let held = Block::new(mix(key, 5000 + level as u64)); // freed by the unwinding
        churn(mix(key, 6000 + level as u64), 4);
        if level + 1 == depth {
            raise(key);
        }
        if level + 1 == catch_at {
            let result = panic::catch_unwind(AssertUnwindSafe(|| {
                panicking_scopes(key, level + 1, depth, catch_at)
            }));
            expect_panic(result, key, "scope_panic");
            expect_arena("scope_panic, after catching", here);
            held.check(held.key, "scope_panic scratch");
            return Block::new(mix(key, 0));
        }
        panicking_scopes(key, level + 1, depth, catch_at)
    })
}

/// `tasks` tasks of a job, in parallel on the current pool.
fn pool_tasks(key: u64, tasks: usize, arenas: &[u32]) -> Vec<Block> {
    (0..tasks)
        .into_par_iter()
        .map(|i| pool_task(key, i, arenas))
        .collect()
}

/// One task: checks it runs in one of `arenas`, does scratch work (in a scope of its
/// own, or split with `join`, for some), and returns block `mix(key, i)`.
fn pool_task(key: u64, i: usize, arenas: &[u32]) -> Block {
    match current_arena() {
        Some(index) if arenas.contains(&index) => {}
        other => fail(format_args!(
            "a task runs in arena {other:?}, not one of the pool's {arenas:?}"
        )),
    }
    let k = mix(key, i as u64);
    match k >> 61 {
        0 => with_arena(|| churn(mix(k, 1), 6)),
        1 => {
            rayon::join(|| churn(mix(k, 2), 3), || churn(mix(k, 3), 3));
        }
        _ => churn(mix(k, 4), 4),
    }
    Block::new(k)
}

/// `tasks` tasks of a phase, in parallel on the current (plain) pool; task `panic_at`
/// panics after making its block.
fn phase_tasks(key: u64, tasks: usize, panic_at: Option<usize>) -> Vec<Block> {
    (0..tasks)
        .into_par_iter()
        .map(|i| {
            let k = mix(key, i as u64);
            churn(mix(k, 5), 4);
            let block = Block::new(k);
            if block.data.capacity() * 8 >= arenapool::phase_threshold()
                && !arenapool::RawAlloc::owns(block.data.as_ptr().cast())
            {
                fail(format_args!(
                    "a phase's block of {} words is not in an arena of arenapool's",
                    block.data.len()
                ));
            }
            if panic_at == Some(i) {
                raise(key);
            }
            block
        })
        .collect()
}

/// A stream task reads a few words of the shared state.
fn check_state(state: &Block, state_key: u64, i: usize) {
    let len = state.data.len();
    for j in [0, i % len, len - 1] {
        if state.data[j] != word(state_key, j) {
            fail(format_args!("stream state corrupt at word {j}"));
        }
    }
}
