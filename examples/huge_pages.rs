//! Scenario S1 through an `ArenaPool`, round after round, with huge pages on or off:
//! what each round costs in time and page faults, how much of the results' memory is in
//! huge pages, and what stays resident after the results are dropped.
//!
//! ```sh
//! cargo run --release --example huge_pages -- --huge on --rounds 5
//! cargo run --release --example huge_pages -- --huge off --rounds 5
//! cargo run --release --example huge_pages -- --huge on --grow   # results grow by push
//! ```
//!
//! Each round: 4,000 tasks on 2 threads return 50,000 f64 (400 KB) each after some
//! scratch churn; the results are summed, then dropped.
use std::time::Instant;

use arenapool::{ArenaAlloc, ArenaPool, Bytes};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const TASKS: usize = 4_000;
const LEN: usize = 50_000;

fn task(i: usize, grow: bool) -> Vec<f64> {
    let scratch: Vec<f64> = (0..LEN).map(|k| (i + k) as f64).collect();
    let smoothed: Vec<f64> = scratch.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
    let mut result: Vec<f64> = if grow {
        let mut result = Vec::new();
        for x in &scratch {
            result.push(x * 0.5 + 1.0);
        }
        result
    } else {
        scratch.iter().map(|x| x * 0.5 + 1.0).collect()
    };
    result[0] = smoothed.iter().sum();
    result
}

/// Minor page faults of this process so far.
fn minor_faults() -> u64 {
    // SAFETY: `getrusage` writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    u64::try_from(usage.ru_minflt).unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut huge = true;
    let mut rounds = 3;
    let mut grow = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--huge" => huge = args.next().as_deref() != Some("off"),
            "--rounds" => rounds = args.next().ok_or("--rounds needs a number")?.parse()?,
            "--grow" => grow = true,
            other => {
                return Err(format!("unknown argument {other:?}: see the example's docs").into())
            }
        }
    }
    let pool = ArenaPool::builder()
        .num_threads(2)
        .huge_pages(huge)
        .build()?;
    pool.run(|| {
        rayon::broadcast(|_| drop(std::hint::black_box(vec![1u8; 1 << 20])));
    });
    let start = arenapool::rss();
    println!(
        "huge pages {} (kernel allows: {}), results {}; RSS at start {}",
        if huge { "on" } else { "off" },
        // The process-wide setting is left at its default (on): this is the kernel's say.
        arenapool::huge_pages(),
        if grow {
            "grown by push"
        } else {
            "made at their size"
        },
        Bytes(start)
    );
    println!("round   job time   minor faults   AnonHugePages   RSS after drop");
    for round in 1..=rounds {
        let faults = minor_faults();
        let started = Instant::now();
        let results: Vec<Vec<f64>> =
            pool.run(|| (0..TASKS).into_par_iter().map(|i| task(i, grow)).collect());
        let time = started.elapsed();
        let faults = minor_faults() - faults;
        let huge_bytes = arenapool::huge_page_rss();
        let checksum: f64 = results.iter().map(|r| r[LEN - 1]).sum();
        drop(results);
        std::hint::black_box(checksum);
        println!(
            "{round:>5} {:>8.3} s {faults:>14} {:>15} {:>16}",
            time.as_secs_f64(),
            Bytes(huge_bytes).to_string(),
            Bytes(arenapool::rss()).to_string()
        );
    }
    Ok(())
}
