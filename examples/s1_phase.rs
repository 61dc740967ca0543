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
mod common;

use std::time::Instant;

use arenapool::ArenaAlloc;
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
    let (results, labels) = if in_phase {
        arenapool::phase(work)
    } else {
        work()
    };
    let elapsed = started.elapsed();
    let name = if in_phase {
        "arenapool::phase"
    } else {
        "plain jemalloc"
    };
    common::report(name, before, results, labels, &format!("{elapsed:.2?}; "));
}

fn main() {
    common::run_modes(
        &format!("S1 on a rayon pool of the program's own: {TASKS} results of 50,000 f64 on 2 workers, then dropped"),
        &["plain", "phase"],
        |mode| run(mode == "phase"),
    );
}
