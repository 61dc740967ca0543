//! Workload and measuring helpers shared by the integration tests.
#![allow(dead_code)]

/// 1 MiB.
pub const MIB: usize = 1 << 20;

/// What glibc's field report does first: each thread frees one 1 MiB block, which
/// (under glibc) raises the mmap threshold so later 400 KB blocks come from heaps.
pub fn warm_up_thread() {
    let block = std::hint::black_box(vec![1u8; MIB]);
    drop(block);
}

/// One S1 task: scratch churn, then a touched 50,000-f64 result (400 KB) and a label.
pub fn s1_task(i: usize) -> (Vec<f64>, String) {
    let scratch: Vec<f64> = (0..50_000).map(|k| (i + k) as f64).collect();
    let extra = vec![scratch[0] + 1.0; 10_000];
    let result: Vec<f64> = scratch.iter().map(|x| x * 0.5 + extra[0]).collect();
    (result, format!("task-{i:06}-label"))
}

/// Checks a result of [`s1_task`].
pub fn check_s1(i: usize, result: &[f64]) {
    assert_eq!(result.len(), 50_000);
    let first = i as f64 * 0.5 + i as f64 + 1.0;
    assert_eq!(result[0], first);
    assert_eq!(result[49_999], (i + 49_999) as f64 * 0.5 + i as f64 + 1.0);
}

/// RSS now, in bytes.
pub fn rss() -> usize {
    arenapool_alloc::rss()
}

/// `a - b` in MiB, signed, for printing.
pub fn mib_diff(a: usize, b: usize) -> f64 {
    (a as f64 - b as f64) / MIB as f64
}
