//! Field report S1 ("memory stays high after I delete the results") on every MPI rank:
//! each rank runs its share of the tasks in an `ArenaPool`, drops the results, and
//! rank 0 prints one table of every rank's report.
//!
//! ```sh
//! cargo build --release --examples
//! mpirun -np 2 target/release/examples/s1_ranks [TASKS_PER_RANK]
//! ```

use arenapool_mpi::{Node, PhaseTable};
use arenapool_pool::ArenaPool;
use mpi::traits::Communicator;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const LEN: usize = 50_000;

fn task(i: usize) -> (Vec<f64>, String) {
    let scratch: Vec<f64> = (0..LEN).map(|k| (i + k) as f64).collect();
    let smoothed: Vec<f64> = scratch.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
    let mut result: Vec<f64> = scratch.iter().map(|x| x * 0.5 + 1.0).collect();
    result[0] = smoothed.iter().sum();
    (result, format!("result-{i}"))
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tasks: usize = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| format!("not a task count: {n:?} (try 2000)"))?,
        None => 2_000,
    };
    let universe = mpi::initialize().ok_or("MPI was already initialised")?;
    let world = universe.world();
    let node = Node::split(&world)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = ArenaPool::builder()
        .num_threads((cores / node.size()).max(1))
        .build()?;
    // As in the report: every worker has freed a 1 MiB block before the phase.
    pool.run(|| rayon::broadcast(|_| drop(std::hint::black_box(vec![1u8; 1 << 20]))));

    let first = world.rank() as usize * tasks;
    let before = arenapool_alloc::rss();
    let (results, report) = pool.run_with_report(|| {
        (first..first + tasks)
            .into_par_iter()
            .map(task)
            .collect::<Vec<_>>()
    });
    let after_phase = arenapool_alloc::rss();
    let checksum: f64 = results.iter().map(|(r, _)| r[LEN - 1]).sum();
    let kept: Vec<String> = results.into_iter().step_by(10).map(|(_, l)| l).collect();
    let after_drop = arenapool_alloc::rss();
    println!(
        "rank {}: RSS before the phase {:.1} MiB, after it {:.1} MiB, after dropping {:.1} MiB; \
         kept {} labels, checksum {checksum}",
        world.rank(),
        mib(before),
        mib(after_phase),
        mib(after_drop),
        kept.len(),
    );
    if let Some(table) = PhaseTable::gather(&world, &report)? {
        println!("{tasks} tasks per rank, {} rank(s):\n{table}", world.size());
    }
    Ok(())
}
