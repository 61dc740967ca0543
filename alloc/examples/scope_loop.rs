//! The cost of a scope in a plain loop: `with_arena` around one allocation that escapes
//! it (freed outside, as a scope's result is), `N` times (10^6 unless given).
//!
//! ```text
//! cargo run --release -p arenapool-alloc --example scope_loop -- [N]
//! ```
//!
//! Prints the time per scope in microseconds. Under
//! `valgrind --tool=callgrind`, the instructions it reports divided by `N` are the
//! scope's cost in instructions, which a loaded machine cannot move.
use std::hint::black_box;
use std::time::Instant;

use arenapool_alloc::{with_arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

fn main() {
    let n: u32 = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .expect("usage: scope_loop [N], N a count of scopes"),
        None => 1_000_000,
    };
    // The first scope creates the arena: not timed. No block here reaches the large
    // path, so no scope starts the idle return's thread, and the process keeps one
    // thread (see `alloc/src/policy/idle.rs`).
    drop(with_arena(|| Box::new(0u64)));
    let started = Instant::now();
    for i in 0..n {
        drop(black_box(with_arena(|| Box::new(u64::from(i)))));
    }
    let per_scope = started.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1));
    println!("with_arena + one allocation: {per_scope:.3} us per scope ({n} scopes)");
}
