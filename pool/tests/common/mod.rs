//! The S1 workload and figures shared by the pool's tests.

// Each test binary uses part of this module.
#![allow(dead_code)]

use arenapool_alloc::Bytes;
use rayon::prelude::*;

/// Doubles in one S1 result: 50,000 f64, about 400 KB.
pub const S1_LEN: usize = 50_000;

/// `vec![x; len]`, written by copying whole blocks: the same memory, touched the same
/// way, but fast in an unoptimised build, where `vec!` fills element by element.
pub fn filled(x: f64, len: usize) -> Vec<f64> {
    let block = [x; 1024];
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = block.len().min(len - v.len());
        v.extend_from_slice(&block[..n]);
    }
    v
}

/// One S1 task: a scratch array and some small temporaries, freed inside; a result
/// array and a small label, returned. Every byte is written, so every page is touched.
pub fn s1_task(i: usize) -> (Vec<f64>, String) {
    let x = 1.0 + i as f64;
    let scratch = filled(x, S1_LEN);
    let churn: Vec<Vec<u64>> = (0..8).map(|k| vec![k + 1; 64 << k]).collect();
    let mut result = scratch.clone();
    result[0] = x * 2.0;
    result[S1_LEN - 1] = churn.iter().map(|v| v.len() as f64).sum();
    (result, format!("label-{i:06}"))
}

/// What `s1_task(i)` must have returned.
pub fn check_s1(i: usize, (result, label): &(Vec<f64>, String)) {
    let x = 1.0 + i as f64;
    assert_eq!(result.len(), S1_LEN);
    assert_eq!(result[0], x * 2.0, "task {i}");
    assert_eq!(result[S1_LEN / 2], x, "task {i}");
    assert_eq!(result[S1_LEN - 1], (64.0 * 255.0), "task {i}");
    assert_eq!(label, &format!("label-{i:06}"));
}

/// `tasks` S1 tasks in parallel on the current rayon pool.
pub fn s1_job(first: usize, tasks: usize) -> Vec<(Vec<f64>, String)> {
    (first..first + tasks)
        .into_par_iter()
        .map(s1_task)
        .collect()
}

/// Every worker of the current pool frees a 1 MiB block (S1's warm-up).
pub fn warm_workers() {
    rayon::broadcast(|_| {
        let block = std::hint::black_box(vec![1u8; 1 << 20]);
        drop(block);
    });
}

/// The arena each worker of the current pool allocates from.
pub fn worker_arenas() -> Vec<Option<u32>> {
    rayon::broadcast(|_| arenapool_alloc::current_arena())
}

/// Bytes held by the labels in `kept`, rounded up generously: their capacity plus a
/// whole page each, for the slab pages they keep resident.
pub fn kept_bytes(kept: &[String]) -> usize {
    kept.iter().map(|s| s.capacity() + 4096).sum()
}

pub fn show(name: &str, bytes: usize) -> String {
    format!("{name} {}", Bytes(bytes))
}

/// Why huge pages cannot be tested here, if they cannot: the kernel's transparent huge
/// page policy is `never`, or it has no transparent huge pages at all.
pub fn no_huge_pages() -> Option<String> {
    let arena = arenapool_alloc::Arena::with_huge_pages(true).expect("an arena");
    if arena.huge_pages() {
        return None;
    }
    Some(
        match std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
            Ok(policy) => format!("transparent huge pages are off (policy: {})", policy.trim()),
            Err(e) => format!("this kernel has no transparent huge pages ({e})"),
        },
    )
}
