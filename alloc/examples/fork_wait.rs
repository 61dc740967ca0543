//! How long a `fork` waits for arenapool's work under way: one thread ends phases of
//! 1 GiB in a loop (each end gives the phase arenas' pages back), while another forks
//! 300 times; each child exits at once. Prints the longest single `fork()` call, and
//! its median and 99th percentile.
//!
//! ```sh
//! cargo run --release -p arenapool-alloc --example fork_wait
//! cargo run --release -p arenapool-alloc --example fork_wait -- --no-phase
//! ```
//!
//! With `--no-phase` the same blocks are allocated and freed outside any phase, in
//! jemalloc's own arenas, where no section of arenapool's is entered: the cost of the
//! `fork` itself (copying the page tables of a process that holds up to 1 GiB), to
//! compare with.
//!
//! A `fork` waits for every section of arenapool's under way (see docs/design.md,
//! "No lock held across `fork`"): a phase's end purging its arenas is one per arena.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arenapool_alloc::{phase, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const FORKS: usize = 300;
const PHASE_BYTES: usize = 1 << 30;
const BLOCK: usize = 16 << 20;

fn main() {
    let in_phase = !std::env::args().any(|arg| arg == "--no-phase");
    let stop = Arc::new(AtomicBool::new(false));
    let phases = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut ended = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let work = || {
                    let blocks: Vec<Vec<u8>> = (0..PHASE_BYTES / BLOCK)
                        .map(|i| vec![i as u8 | 1; BLOCK])
                        .collect();
                    std::hint::black_box(&blocks);
                };
                if in_phase {
                    phase(work);
                } else {
                    work();
                }
                ended += 1;
            }
            ended
        })
    };
    // Let the first phase get under way.
    std::thread::sleep(Duration::from_millis(200));
    let mut waits = Vec::with_capacity(FORKS);
    for _ in 0..FORKS {
        let started = Instant::now();
        // SAFETY: the child calls only `_exit`, which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        waits.push(started.elapsed());
        assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
        let mut status = 0;
        // SAFETY: waits for the child just made.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let ended = phases.join().expect("the phase thread");
    waits.sort();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    println!(
        "fork() while {} of {} MiB end: {FORKS} forks, {ended} ended; \
         median {:.2?}, p99 {:.2?}, longest {:.2?}",
        if in_phase {
            "phases"
        } else {
            "rounds outside phases"
        },
        PHASE_BYTES >> 20,
        at(0.5),
        at(0.99),
        waits[waits.len() - 1]
    );
}
