//! S1 in a phase on a `rayon::ThreadPool` the program built itself (2 threads): 4,000
//! tasks each return 50,000 f64 (1.6 GB); once the results are dropped, RSS is back
//! within 16 MiB of where it started. (Without the phase, jemalloc keeps about 220 MiB
//! of the freed results resident, to decay over seconds.) Alone in its binary: it
//! measures process RSS.
mod common;

use common::*;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

#[test]
fn s1_on_a_rayon_pool_in_a_phase_gives_its_memory_back() {
    let pool = warmed_pool(2);
    let start = rss();

    let (results, labels): (Vec<Vec<f64>>, Vec<String>) =
        arenapool::phase(|| pool.install(|| (0..S1_TASKS).into_par_iter().map(s1_task).unzip()));
    finish_s1("S1 on a rayon pool", start, results, labels);
}
