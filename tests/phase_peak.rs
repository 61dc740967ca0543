//! A phase in which a pool's threads make, transform and drop columns of 10-16 MB, each
//! round's a little longer than the last, as a data-frame library's operators do,
//! peaks near what the threads hold at once, not at all they ever freed: the phase
//! arenas give their free pages back once they hold more than the bound (64 MiB here),
//! instead of keeping them for reuse that cannot come. Alone in its binary: it measures
//! process RSS.
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const MIB: usize = 1 << 20;

/// Rounds, columns per round, and rows of the first round's columns (10 MB of `u64`).
const ROUNDS: usize = 40;
const COLUMNS: usize = 8;
const ROWS: usize = 1_250_000;

fn rounds() -> u64 {
    let mut checksum = 0u64;
    for round in 0..ROUNDS {
        let rows = ROWS + round * 20_000;
        checksum ^= (0..COLUMNS)
            .into_par_iter()
            .map(|c| {
                let column: Vec<u64> = (0..rows as u64).map(|i| i ^ c as u64).collect();
                let derived: Vec<u64> = column.iter().map(|v| v.wrapping_mul(3)).collect();
                drop(column);
                derived.iter().fold(0u64, |a, v| a.wrapping_add(*v))
            })
            .reduce(|| 0, |a, b| a ^ b);
    }
    checksum
}

#[test]
fn large_blocks_freed_in_a_phase_do_not_pile_up() {
    let threads = 4;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let start = arenapool::rss();
    arenapool::reset_peak_rss().unwrap();
    let checksum = arenapool::phase(|| pool.install(rounds));
    std::hint::black_box(checksum);
    let peak = arenapool::peak_rss();
    // At most two columns of up to 16.4 MB per thread are live at once: 131 MB; the
    // bound lets the phase arenas hold 64 MiB more, and a look comes every 16 MiB.
    assert!(
        peak < start + 256 * MIB,
        "RSS peaked {} MiB above the start (at most {} MiB live at once)",
        (peak - start) / MIB,
        threads * 2 * (ROWS + ROUNDS * 20_000) * 8 / MIB
    );
}
