//! The peak RSS of parallel work with a phase and without: columns of a few tens of MB
//! made, transformed and dropped round after round by a rayon pool, as a data-frame
//! library's operators do, each round's columns a little longer than the last.
//!
//! ```text
//! cargo run --release --example phase_peak
//! ```
//!
//! Each mode runs in a process of its own and prints its peak RSS, the RSS after the
//! work and its time: `no-phase` (`ArenaAlloc` alone), `phase` (the whole work in one
//! `arenapool::phase`).

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

mod common;

use std::time::Instant;

use arenapool::Bytes;
use rayon::prelude::*;

/// Rounds of work, the columns made in each, and their length in the first round.
const ROUNDS: usize = 24;
const COLUMNS: usize = 8;
const ROWS: usize = 2_500_000;

fn work() -> u64 {
    let mut checksum = 0u64;
    for round in 0..ROUNDS {
        let rows = ROWS + round * 40_000;
        checksum = checksum.wrapping_add(
            (0..COLUMNS)
                .into_par_iter()
                .map(|c| {
                    let column: Vec<u64> = (0..rows as u64).map(|i| i ^ c as u64).collect();
                    // A derived column, the input dropped before the next step.
                    let derived: Vec<u64> = column.iter().map(|v| v.wrapping_mul(3)).collect();
                    drop(column);
                    let filtered: Vec<u64> =
                        derived.iter().copied().filter(|v| v % 3 == 0).collect();
                    drop(derived);
                    filtered.iter().fold(0u64, |a, v| a.wrapping_add(*v))
                })
                .reduce(|| 0, u64::wrapping_add),
        );
    }
    checksum
}

fn run(mode: &str) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .expect("pool");
    let start = Instant::now();
    let checksum = if mode == "phase" {
        arenapool::phase(|| pool.install(work))
    } else {
        pool.install(work)
    };
    let elapsed = start.elapsed();
    println!(
        "{mode:<10} peak RSS {:>10}   RSS after {:>10}   {:.2} s   (checksum {checksum:x})",
        Bytes(arenapool::peak_rss()).to_string(),
        Bytes(arenapool::rss()).to_string(),
        elapsed.as_secs_f64()
    );
}

fn main() {
    common::run_modes(
        "Columns made and dropped round after round on 4 threads: peak RSS",
        &["no-phase", "phase"],
        run,
    );
}
