//! Data dropped after the phase that used it has ended, then an idle process: what stays.
//!
//! A query engine's table is built first (on several threads, in jemalloc's own arenas:
//! no phase is open yet), a parallel query runs inside a phase, the phase ends, and only
//! then is the table dropped; the program then sits idle, as a service between requests
//! or a notebook between cells does. Each mode runs in a process of its own and prints
//! jemalloc's resident bytes and the process's RSS before the table, right after the
//! drop, and after 2 s idle.
//!
//! ```text
//! cargo run --release --example late_drop
//! cargo run --release --example late_drop -- phase      # one mode
//! ```
//!
//! Modes: `phase` (the query in a phase, the table dropped after it), `no-phase` (no
//! phase at all: the same work under `ArenaAlloc` alone), `trim` (as `phase`, with
//! `arenapool::trim()` after the drop), `no-idle-return` (as `phase`, with
//! `ARENAPOOL_IDLE_RETURN=off`).

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

mod common;

use std::time::{Duration, Instant};

use arenapool::Bytes;
use rayon::prelude::*;

/// Rows of the table, and the threads that build it.
const ROWS: usize = 6_000_000;
const BUILDERS: usize = 4;

/// One part of the table, as a column store builds it: a key column (short strings,
/// small blocks) and two value columns (large blocks).
struct Part {
    keys: Vec<String>,
    values: Vec<f64>,
    counts: Vec<u64>,
}

fn build_table() -> Vec<Part> {
    let per = ROWS / BUILDERS;
    let builders: Vec<_> = (0..BUILDERS)
        .map(|b| {
            std::thread::spawn(move || {
                let start = b * per;
                Part {
                    keys: (start..start + per)
                        .map(|i| format!("key-{:08}", i % 100_003))
                        .collect(),
                    values: (start..start + per).map(|i| i as f64 * 0.5).collect(),
                    counts: (start..start + per).map(|i| i as u64).collect(),
                }
            })
        })
        .collect();
    builders
        .into_iter()
        .map(|b| b.join().expect("builder"))
        .collect()
}

/// The query: a parallel group-by of the values by key, in chunks.
fn query(table: &[Part]) -> usize {
    let groups: Vec<std::collections::HashMap<&str, f64>> = table
        .par_iter()
        .flat_map(|part| {
            part.keys
                .par_chunks(200_000)
                .zip(part.values.par_chunks(200_000))
        })
        .map(|(keys, values)| {
            let mut sums = std::collections::HashMap::new();
            for (k, v) in keys.iter().zip(values) {
                *sums.entry(k.as_str()).or_insert(0.0) += v;
            }
            sums
        })
        .collect();
    groups.iter().map(|g| g.len()).sum()
}

fn line(label: &str) {
    let m = arenapool::memory();
    println!(
        "  {label:<22} jemalloc resident {:>10}   RSS {:>10}",
        Bytes(m.resident).to_string(),
        Bytes(m.rss).to_string()
    );
}

fn run(mode: &str) {
    println!("{mode}:");
    line("before the table");
    let before = arenapool::memory();
    let table = build_table();
    let groups = if mode == "no-phase" {
        query(&table)
    } else {
        arenapool::phase(|| query(&table))
    };
    let rows: usize = table
        .iter()
        .map(|p| p.keys.len() + p.counts.len() / p.values.len().max(1))
        .sum();
    line("table and result");
    drop(table);
    if mode == "trim" {
        arenapool::trim().expect("trim");
    }
    let dropped = Instant::now();
    line("right after the drop");
    let mut timeline = String::new();
    for step in 1..=8 {
        std::thread::sleep(
            Duration::from_millis(250).saturating_sub(
                dropped
                    .elapsed()
                    .saturating_sub(Duration::from_millis(250 * (step - 1))),
            ),
        );
        let heap = arenapool::memory().resident.saturating_sub(before.resident);
        timeline.push_str(&format!(
            " {:.2} s: {};",
            dropped.elapsed().as_secs_f64(),
            Bytes(heap)
        ));
    }
    println!("  heap above the start after the drop:{timeline}");
    let idle = arenapool::memory();
    line("2 s idle after it");
    println!(
        "  above the start after 2 s: heap {}, RSS {} ({rows} rows, {groups} groups, {:.1} s)\n",
        Bytes(idle.resident.saturating_sub(before.resident)),
        Bytes(idle.rss.saturating_sub(before.rss)),
        dropped.elapsed().as_secs_f64()
    );
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("no-idle-return") {
        std::env::set_var("ARENAPOOL_IDLE_RETURN", "off");
    }
    common::run_modes(
        "A table built before the phase, dropped after it, then 2 s idle",
        &["phase", "no-phase", "trim", "no-idle-return"],
        run,
    );
}
