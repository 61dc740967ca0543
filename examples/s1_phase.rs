//! Scenario S1 on threads arenapool does not own: a rayon pool of the program's own (as
//! a data-frame or query library keeps), inside `arenapool::phase`.
//!
//! 4,000 tasks on 2 workers each return 50,000 f64 (400 KB, 1.6 GB in all); 10% of the
//! small labels are kept, the results dropped. Prints RSS before, after the parallel
//! work and after dropping, with plain jemalloc and inside a phase, each in a child
//! process of its own so neither inherits the other's memory.
//!
//! ```sh
//! cargo run --release --example s1_phase
//! ```
use std::process::Command;
use std::time::Instant;

use arenapool::{ArenaAlloc, Bytes};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const TASKS: usize = 4_000;

fn run(in_phase: bool) {
    // The library's pool: arenapool neither built it nor can change it.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a rayon pool");
    // As in the report, each worker has freed a 1 MiB block before.
    pool.broadcast(|_| drop(std::hint::black_box(vec![1u8; 1 << 20])));
    let before = arenapool::rss();
    let started = Instant::now();
    let work = || {
        pool.install(|| {
            (0..TASKS)
                .into_par_iter()
                .map(|i| (vec![i as f64; 50_000], format!("result-{i}")))
                .unzip::<_, _, Vec<_>, Vec<_>>()
        })
    };
    let (results, mut labels) = if in_phase {
        arenapool::phase(work)
    } else {
        work()
    };
    let elapsed = started.elapsed();
    let after_run = arenapool::rss();
    labels.retain(|l| l.ends_with('0'));
    let checksum: f64 = results.iter().map(|r| r[r.len() - 1]).sum();
    drop(results);
    let after_drop = arenapool::rss();
    println!(
        "{:<18} before {:>10}   after the work {:>10}   after dropping {:>10}   ({elapsed:.2?}; kept {} labels, checksum {checksum})",
        if in_phase { "arenapool::phase" } else { "plain jemalloc" },
        Bytes(before).to_string(),
        Bytes(after_run).to_string(),
        Bytes(after_drop).to_string(),
        labels.len(),
    );
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("plain") => run(false),
        Some("phase") => run(true),
        _ => {
            println!("S1 on a rayon pool of the program's own: {TASKS} results of 50,000 f64 on 2 workers, then dropped\n");
            let me = std::env::current_exe().expect("path of this example");
            for mode in ["plain", "phase"] {
                let status = Command::new(&me).arg(mode).status().expect("run a child");
                assert!(status.success(), "{mode} run failed: {status}");
            }
        }
    }
}
