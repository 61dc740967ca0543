//! Scenario S1, "memory stays high after I delete the results", on one thread.
//!
//! Builds 1,000 results of 50,000 f64 (400 KB each) with scratch churn, keeps 10% of
//! the small labels, drops the results, and prints RSS before, after the phase and
//! after dropping: once with plain jemalloc, once inside `arenapool::with_arena`. Each
//! mode runs in a child process of its own, so neither inherits the other's memory.
//!
//! ```sh
//! cargo run --release --example s1
//! ```
mod common;

use arenapool::{with_arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const TASKS: usize = 1_000;

fn task(i: usize) -> (Vec<f64>, String) {
    let scratch: Vec<f64> = (0..50_000).map(|k| (i + k) as f64).collect();
    let result: Vec<f64> = scratch.iter().map(|x| x * 0.5 + 1.0).collect();
    (result, format!("result-{i}"))
}

fn phase(scoped: bool) {
    drop(std::hint::black_box(vec![1u8; 1 << 20])); // as the report: free 1 MiB first
    let before = arenapool::rss();
    let (results, labels): (Vec<Vec<f64>>, Vec<String>) = if scoped {
        with_arena(|| (0..TASKS).map(task).unzip())
    } else {
        (0..TASKS).map(task).unzip()
    };
    let name = if scoped {
        "arenapool::with_arena"
    } else {
        "plain jemalloc"
    };
    common::report(name, before, results, labels, "");
}

fn main() {
    common::run_modes(
        &format!("S1: {TASKS} results of 50,000 f64 (400 KB each), built with scratch churn, then dropped"),
        &["plain", "scoped"],
        |mode| phase(mode == "scoped"),
    );
}
