//! How long a `fork` waits for arenapool's work under way: one thread ends phases of
//! 1 GiB in a loop (each end gives the phase arenas' pages back), while another forks
//! 300 times; each child exits at once. Prints the longest single `fork()` call, its
//! median and 99th percentile, and the longest phase end.
//!
//! ```sh
//! cargo run --release -p arenapool-alloc --example fork_wait
//! cargo run --release -p arenapool-alloc --example fork_wait -- --no-phase
//! cargo run --release -p arenapool-alloc --example fork_wait -- --block-mib 1024
//! ```
//!
//! With `--no-phase` the same blocks are allocated and freed outside any phase, in
//! jemalloc's own arenas, where no section of arenapool's is entered: the cost of the
//! `fork` itself (copying the page tables of a process that holds up to 1 GiB), to
//! compare with. `--block-mib N` sets the size of each block (16 MiB unless given):
//! with 1024, each phase is one block, whose pages go back in one call to the kernel.
//!
//! A `fork` waits for every section of arenapool's under way (see docs/design.md,
//! "No lock held across `fork`"): a phase's end purging its arenas is one per arena,
//! and so is each purge of the phase arenas while a phase is open (when their free
//! pages pass their bound). The kernel also makes a `fork` wait for a call that gives
//! pages back (`madvise`) in the same process, ours or jemalloc's: with one block of
//! 1 GiB, `--no-phase` waits as long.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arenapool_alloc::{phase_report, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const FORKS: usize = 300;
const PHASE_BYTES: usize = 1 << 30;

fn main() {
    let mut in_phase = true;
    let mut block_mib = 16usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-phase" => in_phase = false,
            "--block-mib" => {
                block_mib = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0 && n <= PHASE_BYTES >> 20)
                    .unwrap_or_else(|| usage());
            }
            _ => usage(),
        }
    }
    let block = block_mib << 20;
    let stop = Arc::new(AtomicBool::new(false));
    let phases = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut ends = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let work = || {
                    let blocks: Vec<Vec<u8>> = (0..PHASE_BYTES / block)
                        .map(|i| vec![i as u8 | 1; block])
                        .collect();
                    std::hint::black_box(&blocks);
                };
                if in_phase {
                    let ((), report) = phase_report(work);
                    ends.push(report.purge_time);
                } else {
                    let started = Instant::now();
                    work();
                    ends.push(started.elapsed());
                }
            }
            ends
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
    let ends = phases.join().expect("the phase thread");
    waits.sort();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize];
    let what = if in_phase {
        "phases"
    } else {
        "rounds outside phases"
    };
    println!(
        "fork() while {what} of {} MiB in blocks of {block_mib} MiB end: {FORKS} forks, \
         {} ended; median {:.2?}, p99 {:.2?}, longest {:.2?}",
        PHASE_BYTES >> 20,
        ends.len(),
        at(0.5),
        at(0.99),
        waits[waits.len() - 1]
    );
    if in_phase {
        let longest = ends.iter().max().copied().unwrap_or_default();
        println!("longest phase end (giving back): {longest:.2?}");
    }
}

fn usage() -> ! {
    eprintln!("usage: fork_wait [--no-phase] [--block-mib N (1 to 1024, default 16)]");
    std::process::exit(2)
}
