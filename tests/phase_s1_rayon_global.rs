//! S1 in a phase on rayon's global pool (built with 2 threads), driven by `par_iter`
//! from the test's thread: 4,000 tasks each return 50,000 f64 (1.6 GB); once the
//! results are dropped, RSS is back within 16 MiB of where it started. Alone in its
//! binary: it measures process RSS, and it builds the global pool.
mod common;

use common::*;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

#[test]
fn s1_on_rayons_global_pool_in_a_phase_gives_its_memory_back() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .unwrap();
    rayon::broadcast(|_| warm_up_thread());
    let start = rss();

    let (results, labels): (Vec<Vec<f64>>, Vec<String>) =
        arenapool::phase(|| (0..S1_TASKS).into_par_iter().map(s1_task).unzip());
    assert!(!arenapool::phase_is_open());
    assert_eq!(rayon::current_num_threads(), 2);
    finish_s1("S1 on rayon's global pool", start, results, labels);
}
