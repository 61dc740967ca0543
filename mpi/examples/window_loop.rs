//! Field report 004 ("creating a shared buffer in a loop leaks"), done right: every
//! iteration makes an 800 KB node-shared window, rank 0 writes it, every rank reads
//! it, and dropping it frees it on every rank. Prints each rank's memory as it goes.
//!
//! ```sh
//! cargo build --release --examples
//! mpirun -np 2 target/release/examples/window_loop [ITERATIONS] [--leak]
//! ```
//!
//! With `--leak` no window is freed until the loop ends (they are kept in a list), as
//! in the report's program: memory then grows by 800 KB per iteration on every rank,
//! and goes back when they are dropped at the end.

use std::time::Instant;

use arenapool_mpi::{node_shmem, rss_shmem, Node};
use mpi::traits::Communicator;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const LEN: usize = 100_000;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut iterations = 20_000usize;
    let mut leak = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--leak" => leak = true,
            n => {
                iterations = n
                    .parse()
                    .map_err(|_| format!("not an iteration count: {n:?} (try 20000)"))?
            }
        }
    }
    let universe = mpi::initialize().ok_or("MPI was already initialised")?;
    let world = universe.world();
    let node = Node::split(&world)?;
    let report = |i: usize| {
        println!(
            "rank {}: iteration {i:>6}: RSS {:7.1} MiB, RssShmem {:7.1} MiB, node Shmem {:7.1} MiB",
            world.rank(),
            mib(arenapool_alloc::rss()),
            mib(rss_shmem()),
            mib(node_shmem()),
        );
    };

    let step = (iterations / 5).max(1);
    let mut kept = Vec::new();
    let clock = Instant::now();
    for i in 0..iterations {
        let mut w = node.allocate::<f64>(if node.rank() == 0 { LEN } else { 0 })?;
        w.write(|mine| mine.fill(i as f64));
        let seen = w.segment(0);
        if seen.iter().any(|&x| x != i as f64) {
            return Err(format!("iteration {i}: rank {} read a stale value", node.rank()).into());
        }
        if leak {
            kept.push(w);
        } else {
            drop(w);
        }
        if i % step == 0 {
            report(i);
        }
    }
    node.barrier();
    report(iterations);
    let elapsed = clock.elapsed();
    if leak {
        drop(kept);
        node.barrier();
        println!("rank {}: dropped the windows kept by --leak", world.rank());
        report(iterations);
    }
    if world.rank() == 0 {
        println!(
            "{iterations} iterations in {elapsed:.2?}: {:.0} per second{}",
            iterations as f64 / elapsed.as_secs_f64(),
            if leak { " (windows kept)" } else { "" },
        );
    }
    Ok(())
}
