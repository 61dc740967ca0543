//! Scenario S2, "each worker copies my big array, and results pile up", as a stream.
//!
//! A 64 MiB table is shared by every task through an `Arc` (never copied); 200 inputs
//! each produce a 16 MiB result, mapped with `ArenaPool::map_stream` and consumed one
//! at a time. Peak memory stays near the table plus a window of results, where
//! collecting them would hold 3.2 GiB. The window is the first argument (default 4).
//!
//! ```sh
//! cargo run --release --example s2_stream -- 4
//! ```
use std::sync::Arc;

use arenapool::{ArenaAlloc, ArenaPool, Bytes};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const INPUTS: usize = 200;
const RESULT_LEN: usize = 2 << 20; // f64s: 16 MiB

fn main() -> Result<(), arenapool::BuildError> {
    let window = std::env::args()
        .nth(1)
        .map_or(4, |w| w.parse().expect("the window is a number"));
    let pool = ArenaPool::builder()
        .num_threads(2)
        .stream_window(window)
        .build()?;
    let table: Arc<Vec<f64>> = Arc::new((0..8 << 20).map(|i| (i % 1000) as f64).collect());

    arenapool::reset_peak_rss().ok();
    let start = arenapool::rss();
    let shared = Arc::clone(&table);
    let results = pool.map_stream(0..INPUTS, move |i| {
        let scale = 1.0 + i as f64;
        let result: Vec<f64> = shared[..RESULT_LEN].iter().map(|x| x * scale).collect();
        (i, result)
    });
    let mut total = 0.0;
    for (i, result) in results {
        // Consume, then drop, each result before the next is asked for.
        total += result[i % RESULT_LEN];
    }
    let peak = arenapool::peak_rss();

    println!(
        "window                   {window} results of {}",
        Bytes(RESULT_LEN * 8)
    );
    println!(
        "RSS at the start         {:>10} (the shared table included)",
        Bytes(start).to_string()
    );
    println!("peak RSS while streaming {:>10}", Bytes(peak).to_string());
    println!(
        "RSS after the stream     {:>10}",
        Bytes(arenapool::rss()).to_string()
    );
    println!(
        "collecting instead would hold {}",
        Bytes(INPUTS * RESULT_LEN * 8)
    );
    println!("checksum {total}");
    Ok(())
}
