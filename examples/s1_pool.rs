//! Scenario S1, "memory stays high after I delete the results", through an `ArenaPool`.
//!
//! 4,000 tasks on 2 threads, each returning 50,000 f64 (400 KB) after some scratch
//! churn; 10% of the small labels are kept. Prints RSS before the phase, after it, and
//! after dropping the results, with the job's report.
//!
//! ```sh
//! cargo run --release --example s1_pool
//! ```
use arenapool::{ArenaAlloc, ArenaPool, Bytes};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const TASKS: usize = 4_000;
const LEN: usize = 50_000;

fn task(i: usize) -> (Vec<f64>, String) {
    let scratch: Vec<f64> = (0..LEN).map(|k| (i + k) as f64).collect();
    let smoothed: Vec<f64> = scratch.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
    let mut result: Vec<f64> = scratch.iter().map(|x| x * 0.5 + 1.0).collect();
    result[0] = smoothed.iter().sum();
    (result, format!("result-{i}"))
}

fn main() -> Result<(), arenapool::BuildError> {
    let pool = ArenaPool::builder().num_threads(2).build()?;
    // As in the report: every worker has freed a 1 MiB block before the phase.
    pool.run(|| {
        rayon::broadcast(|_| drop(std::hint::black_box(vec![1u8; 1 << 20])));
    });

    let before = arenapool::rss();
    let ((results, labels), report) = pool.run_with_report(|| {
        (0..TASKS)
            .into_par_iter()
            .map(task)
            .unzip::<_, _, Vec<Vec<f64>>, Vec<String>>()
    });
    let after_phase = arenapool::rss();
    let checksum: f64 = results.iter().map(|r| r[LEN - 1]).sum();
    let kept: Vec<String> = labels.into_iter().step_by(10).collect();
    drop(results);
    let after_drop = arenapool::rss();

    println!("RSS before the phase     {:>10}", Bytes(before).to_string());
    println!(
        "RSS after the phase      {:>10}",
        Bytes(after_phase).to_string()
    );
    println!(
        "RSS after dropping       {:>10}",
        Bytes(after_drop).to_string()
    );
    println!("job: {report}");
    println!("kept {} labels; checksum {checksum}", kept.len());
    Ok(())
}
