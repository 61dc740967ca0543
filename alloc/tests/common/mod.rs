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

/// The process's minor page faults so far.
pub fn minor_faults() -> i64 {
    // SAFETY: `getrusage` fills the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    usage.ru_minflt
}

/// `a - b` in MiB, signed, for printing.
pub fn mib_diff(a: usize, b: usize) -> f64 {
    (a as f64 - b as f64) / MIB as f64
}

/// An arena that stands by: idle (its free pages given back), then left to
/// `retain_freed_on_use`.
pub fn standing_by() -> arenapool_alloc::Arena {
    let arena = arenapool_alloc::Arena::new().expect("an arena");
    arena.return_freed().expect("idle");
    arena.retain_freed_on_use().expect("standing by");
    arena
}

/// Allocates `bytes` in blocks of `block` bytes on the calling thread, touches them,
/// and frees them. The list of blocks is `list`, allocated by the caller: inside an
/// arena that stands by, a list of 16 KiB or more made here would itself be a large
/// block.
pub fn churn(list: &mut Vec<Vec<u8>>, bytes: usize, block: usize) {
    assert!(list.capacity() >= bytes / block);
    list.extend((0..bytes / block).map(|i| vec![(i % 251) as u8 + 1; block]));
    std::hint::black_box(&list);
    list.clear();
}

/// A list for [`churn`].
pub fn list(bytes: usize, block: usize) -> Vec<Vec<u8>> {
    Vec::with_capacity(bytes / block)
}

/// Churns 16 MiB in objects of 1 KiB in `arena` (see [`churn`]; `list` from
/// [`list`]), flushing the thread's cache each time, until RSS is more than 12 MiB
/// above `before` or 30 s have passed; returns the RSS then. Objects that small never
/// switch an arena that stands by, so the RSS grows only once its first purge has
/// switched it, on a thread of arenapool's: hence the repeats.
pub fn churn_small_until_kept(
    arena: &arenapool_alloc::Arena,
    list: &mut Vec<Vec<u8>>,
    before: usize,
) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    arena.enter(|| loop {
        churn(list, 16 * MIB, 1024);
        arenapool_alloc::flush_thread_cache().expect("a flush");
        let now = rss();
        if now > before + 12 * MIB || std::time::Instant::now() > deadline {
            return now;
        }
    })
}

/// A phase in which a C library's 100 MB of small `malloc` blocks are made and freed
/// below one it keeps (so that glibc's own trimming, at the top of a heap, cannot give
/// them back); checks that glibc's figures saw them freed, and that the phase's end
/// gave them back: RSS within 16 MiB of where it started.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn check_phase_end_trims_the_c_heap() {
    const BLOCKS: usize = 100_000;
    warm_up_thread();
    arenapool_alloc::phase(|| ());
    let before = rss();
    let kept = arenapool_alloc::phase(|| {
        let blocks: Vec<*mut libc::c_void> = (0..BLOCKS)
            // SAFETY: `malloc` of a non-zero size; each block is freed once below, or
            // kept and freed at the end.
            .map(|_| unsafe { libc::malloc(1000) })
            .collect();
        assert!(blocks.iter().all(|b| !b.is_null()), "malloc failed");
        for &block in &blocks[..BLOCKS - 1] {
            // SAFETY: each block came from `malloc` above and is freed once.
            unsafe { libc::free(block) };
        }
        let heap = arenapool_alloc::c_heap().expect("glibc's figures");
        assert!(
            heap.free >= 64 * MIB,
            "the blocks were not freed into the heaps: {heap:?}"
        );
        blocks[BLOCKS - 1]
    });
    let after = rss();
    // SAFETY: the last block, from `malloc`, freed once.
    unsafe { libc::free(kept) };

    eprintln!(
        "C heap: before {:.1} MiB, after the phase +{:.1} MiB",
        before as f64 / MIB as f64,
        mib_diff(after, before)
    );
    assert!(
        after <= before + 16 * MIB,
        "RSS after the phase is {:.1} MiB above the start",
        mib_diff(after, before)
    );
}

/// The names of the process's threads.
pub fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}
