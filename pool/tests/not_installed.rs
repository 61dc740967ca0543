//! Without `ArenaAlloc` as the global allocator, jobs and streams still run, without
//! an arena (a warning says why), and give correct results.

use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[test]
fn jobs_run_without_an_arena() {
    assert!(!arenapool_alloc::is_installed());
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    let sum: u64 = pool.run(|| (0..1_000u64).into_par_iter().sum());
    assert_eq!(sum, 499_500);
    let (len, report) = pool.run_with_report(|| vec![1u8; 1 << 20].len());
    assert_eq!(len, 1 << 20);
    assert!(report.arenas.is_empty());
    assert!(pool.arena_indices().is_empty());
    let squares: Vec<u32> = pool.map_stream(0..5u32, |i| i * i).collect();
    assert_eq!(squares, [0, 1, 4, 9, 16]);
    assert!(pool.run(arenapool_alloc::current_arena).is_none());
}
