//! What `arenapool::stats()` costs, with 8 and with 128 arenas of arenapool's in the
//! process (each holding a little memory), and whether jobs running meanwhile notice.
//!
//! Prints, for each count, the median time of a call with its range over the calls,
//! and the arenas jemalloc counted in the snapshot (jemalloc's own included). Then the
//! median time of a small pool job, alone and while another thread calls `stats()`
//! once a millisecond (a scrape every second is a thousand times rarer).
//!
//! ```sh
//! cargo run --release --example stats_cost -- [--calls 300]
//! ```
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arenapool::{Arena, ArenaAlloc, ArenaPool};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

fn median_and_range(mut times: Vec<Duration>) -> String {
    times.sort();
    format!(
        "median {:>9.1?} (range {:.1?} to {:.1?})",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    )
}

fn main() {
    let mut calls = 300;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--calls", Some(n)) => calls = n.parse().expect("--calls N"),
            _ => panic!("usage: stats_cost [--calls N]"),
        }
    }
    let mut arenas: Vec<Arena> = Vec::new();
    let mut kept = Vec::new();
    for target in [8, 128] {
        while arenas.len() < target {
            let arena = Arena::new().expect("an arena");
            kept.push(arena.enter(|| vec![1u8; 256 << 10]));
            arenas.push(arena);
        }
        let times: Vec<Duration> = (0..calls)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(arenapool::stats());
                started.elapsed()
            })
            .collect();
        let s = arenapool::stats();
        let in_process = s
            .by_kind()
            .iter()
            .map(|(_, held)| held.arenas)
            .sum::<usize>();
        println!(
            "stats() with {target:>3} arenas of arenapool's ({in_process:>3} in the process): {}",
            median_and_range(times)
        );
    }
    drop(kept);
    drop(arenas);

    let pool = ArenaPool::builder().num_threads(1).build().expect("a pool");
    let job = || {
        pool.run(|| {
            (0..16)
                .into_par_iter()
                .map(|i| {
                    vec![i as u8; 64 << 10]
                        .iter()
                        .map(|&b| b as u64)
                        .sum::<u64>()
                })
                .sum::<u64>()
        })
    };
    let jobs = |n: usize| -> Vec<Duration> {
        (0..n)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(job());
                started.elapsed()
            })
            .collect()
    };
    let alone = jobs(2000);
    let stop = AtomicBool::new(false);
    let beside = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(arenapool::stats());
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let times = jobs(2000);
        stop.store(true, Ordering::Relaxed);
        times
    });
    println!("pool job alone:                {}", median_and_range(alone));
    println!(
        "pool job beside stats()/1 ms:  {}",
        median_and_range(beside)
    );
}
