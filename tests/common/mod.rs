//! Workload and measuring helpers shared by the facade's integration tests of phases.
#![allow(dead_code)]

use arenapool::Bytes;

/// 1 MiB.
pub const MIB: usize = 1 << 20;

/// The S1 workload: this many tasks, each returning 50,000 f64 (400 KB; 1.6 GB in all).
pub const S1_TASKS: usize = 4_000;

/// f64 in one S1 result.
pub const S1_LEN: usize = 50_000;

/// What the field report's program does first on each worker: free one 1 MiB block
/// (under glibc this raises the mmap threshold, so that later 400 KB blocks come from
/// the heaps it keeps).
pub fn warm_up_thread() {
    drop(std::hint::black_box(vec![1u8; MIB]));
}

/// A rayon pool of `threads` workers, as a library would build one, each of whose
/// workers has run [`warm_up_thread`].
pub fn warmed_pool(threads: usize) -> rayon::ThreadPool {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.broadcast(|_| warm_up_thread());
    pool
}

/// One S1 task: 400 KB of scratch freed inside it, then a touched 400 KB result and a
/// small label.
pub fn s1_task(i: usize) -> (Vec<f64>, String) {
    let scratch = std::hint::black_box(vec![i as f64; S1_LEN]);
    let mut result = scratch.clone();
    result[0] += 1.0;
    result[S1_LEN - 1] = scratch[7] * 2.0;
    (result, format!("task-{i:06}-label"))
}

/// Checks what [`s1_task`]`(i)` returned.
pub fn check_s1(i: usize, result: &[f64], label: &str) {
    let x = i as f64;
    assert_eq!(result.len(), S1_LEN, "result {i}");
    assert_eq!(
        (result[0], result[1], result[S1_LEN / 2], result[S1_LEN - 1]),
        (x + 1.0, x, x, 2.0 * x),
        "result {i}"
    );
    assert_eq!(label, format!("task-{i:06}-label"));
}

/// Keeps one label in ten, as the field report's program does; returns the bytes the
/// kept ones hold.
pub fn keep_tenth(labels: &mut Vec<String>) -> usize {
    labels.retain(|l| l.ends_with("0-label"));
    labels.shrink_to_fit();
    labels.iter().map(String::capacity).sum::<usize>()
        + labels.capacity() * std::mem::size_of::<String>()
}

/// Checks and drops the results of an S1 run over tasks `0..S1_TASKS`, in task order,
/// keeping a tenth of the labels; returns the kept labels.
pub fn check_and_drop_s1(results: Vec<Vec<f64>>, labels: Vec<String>) -> Vec<String> {
    assert_eq!(results.len(), S1_TASKS);
    assert_eq!(labels.len(), S1_TASKS);
    for (i, (r, l)) in results.iter().zip(&labels).enumerate() {
        check_s1(i, r, l);
    }
    let mut labels = labels;
    keep_tenth(&mut labels);
    assert_eq!(labels.len(), S1_TASKS / 10);
    drop(results);
    labels
}

/// RSS now, in bytes.
pub fn rss() -> usize {
    arenapool::rss()
}

/// `a - b` in MiB, signed, for printing.
pub fn mib_diff(a: usize, b: usize) -> f64 {
    (a as f64 - b as f64) / MIB as f64
}

/// Asserts that the work touched its memory: RSS rose by more than `least` bytes.
pub fn assert_touched(what: &str, start: usize, during: usize, least: usize) {
    assert!(
        during > start + least,
        "{what}: RSS rose by {:+.1} MiB only, not over {}: the work did not touch its memory",
        mib_diff(during, start),
        Bytes(least)
    );
}

/// Prints the figures, then asserts that RSS is at most `margin` bytes above `start`.
pub fn assert_back(what: &str, start: usize, during: usize, now: usize, margin: usize) {
    eprintln!(
        "{what}: RSS at start {}, with the results {:+.1} MiB, after dropping them {:+.1} MiB",
        Bytes(start),
        mib_diff(during, start),
        mib_diff(now, start),
    );
    let memory = arenapool::memory();
    eprintln!("{what}: {memory}, metadata {}", Bytes(memory.metadata));
    assert!(
        now <= start + margin,
        "{what}: RSS is {:+.1} MiB above the start after the results were dropped \
         (allowed: {})",
        mib_diff(now, start),
        Bytes(margin)
    );
}

/// The end of every S1 test: with the phase over and the results in hand, checks that
/// the work touched its memory, checks and drops the results (keeping a tenth of the
/// labels), and asserts that RSS is back within 16 MiB of `start`.
pub fn finish_s1(what: &str, start: usize, results: Vec<Vec<f64>>, labels: Vec<String>) {
    assert!(!arenapool::phase_is_open(), "{what}: a phase is still open");
    let during = rss();
    assert_touched(what, start, during, 1 << 30);
    let labels = check_and_drop_s1(results, labels);
    let now = rss();
    assert_back(what, start, during, now, 16 * MIB);
    drop(labels);
}

/// After a drop, waits until jemalloc's resident heap is back within 16 MiB of `start`,
/// or `limit` has passed since the drop, calling `meanwhile` between looks (reading
/// jemalloc's figures allocates nothing large); fails saying how much it still holds.
/// `built` is the heap before the drop, for the message.
pub fn heap_comes_back(
    start: usize,
    built: usize,
    limit: std::time::Duration,
    mut meanwhile: impl FnMut(),
) {
    let dropped = std::time::Instant::now();
    let mut now = arenapool::memory().resident;
    while now > start + 16 * MIB && dropped.elapsed() < limit {
        meanwhile();
        now = arenapool::memory().resident;
    }
    assert!(
        now <= start + 16 * MIB,
        "jemalloc still holds {} MiB above the start {:.1} s after the drop \
         ({} MiB right after building)",
        (now - start) / MIB,
        dropped.elapsed().as_secs_f64(),
        (built - start) / MIB
    );
}
