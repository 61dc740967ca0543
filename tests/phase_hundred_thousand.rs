//! 100,000 phases one after the other, each with a little parallel work on a rayon pool
//! of 2 (a 64 KiB block per task, in a phase arena): RSS stays flat (at most 1 MiB of
//! growth after a warm-up) and no arena is taken per phase. Alone in its binary: it
//! measures RSS and counts arenas.
mod common;

use std::time::Instant;

use arenapool::{live_arenas, phase_is_open, RawAlloc};
use common::*;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const PHASES: usize = 100_000;
const WARM_UP: usize = 2_000;
/// Tasks per phase, each with a 64 KiB block (above the phase threshold).
const TASKS: usize = 4;
const BLOCK: usize = 64 << 10;

/// One phase: `TASKS` tasks on the pool, each touching a 64 KiB block; returns how
/// many of the blocks lay in a phase arena, and a checksum.
fn one_phase(pool: &rayon::ThreadPool, n: usize) -> (usize, usize) {
    arenapool::phase(|| {
        pool.install(|| {
            (0..TASKS)
                .into_par_iter()
                .map(|t| {
                    let fill = (n + t) as u8;
                    let block = std::hint::black_box(vec![fill; BLOCK]);
                    (
                        usize::from(RawAlloc::owns(block.as_ptr())),
                        usize::from(block[0]) + usize::from(block[BLOCK - 1]),
                    )
                })
                .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
    })
}

fn checksum(n: usize) -> usize {
    (0..TASKS).map(|t| 2 * usize::from((n + t) as u8)).sum()
}

#[test]
fn a_hundred_thousand_phases_run_in_flat_memory() {
    assert!(arenapool::phase_threshold() <= BLOCK);
    let pool = warmed_pool(2);

    // Warm up: the first phase makes the phase arenas, the first few hundred touch
    // jemalloc's structures and the pool's.
    for n in 0..WARM_UP {
        assert_eq!(one_phase(&pool, n), (TASKS, checksum(n)), "phase {n}");
    }
    // The phase arenas, one per CPU, made once: the only arenas taken.
    let arenas = live_arenas();
    let ((), report) = arenapool::phase_report(|| ());
    assert_eq!(arenas, report.arenas.len(), "{report}");
    let before = rss();
    let started = Instant::now();

    for n in WARM_UP..WARM_UP + PHASES {
        let (in_phase_arenas, sum) = one_phase(&pool, n);
        assert_eq!(
            in_phase_arenas, TASKS,
            "phase {n}: a task's block was not in a phase arena"
        );
        assert_eq!(sum, checksum(n), "phase {n}");
        if n % 10_000 == 0 {
            assert_eq!(live_arenas(), arenas, "phase {n} took arenas");
        }
    }
    let took = started.elapsed();
    let after = rss();
    assert!(!phase_is_open());

    eprintln!(
        "{PHASES} phases: {took:.2?} ({:.1} µs each); RSS {} -> {} ({:+.3} MiB); {arenas} \
         arenas live throughout",
        took.as_secs_f64() * 1e6 / PHASES as f64,
        arenapool::Bytes(before),
        arenapool::Bytes(after),
        mib_diff(after, before)
    );
    assert_eq!(live_arenas(), arenas, "phases took arenas");
    assert!(
        after <= before + MIB,
        "RSS grew by {:+.3} MiB over {PHASES} phases",
        mib_diff(after, before)
    );
}
