//! The pool against plain rayon on the same jemalloc, in the same run.
//!
//! - `s1`: the S1 workload (tasks returning 50,000 f64 each, with scratch churn), the
//!   job alone (results dropped outside the timing). Plain rayon runs `warm` (reusing
//!   the pages jemalloc kept from the previous iteration) and `cold` (after `trim`,
//!   like a first phase); the pool starts cold, since it gave the pages back, unless
//!   built with `keep_warm` (`arenapool/keep_warm`: the same job back to back).
//! - `empty_job`: the fixed cost of a job (start it, end it: give the pool's free pages
//!   back).
//! - `tiny_job`: a job of 8 tasks with 2–5 KB of scratch each (the S3 loop's job).
//! - `small_objects`: each task builds and drops a `BTreeMap<String, Vec<u8>>`.
//! - `wide`: `tiny_job`, and a job whose 8 tasks return 64 KiB each (dropped before the
//!   next job), on pools of 2, 32 and 128 workers: what a job's start and end cost per
//!   worker (oversubscribed where the machine has fewer cores). The `results` jobs of
//!   the pool give 512 KiB back and fault it in again each time, which plain rayon does
//!   not; `examples/wide_pool.rs` measures that physical limit too, interleaved.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use arenapool_pool::ArenaPool;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const THREADS: usize = 2;
/// S1's task count is 4,000; a tenth keeps one iteration near 50 ms.
const S1_TASKS: usize = 400;
const S1_LEN: usize = 50_000;

fn s1_task(i: usize) -> (Vec<f64>, String) {
    let scratch = vec![1.0 + i as f64; S1_LEN];
    let partial: Vec<f64> = scratch.iter().map(|x| x * 0.5).collect();
    let result: Vec<f64> = partial.iter().zip(&scratch).map(|(a, b)| a + b).collect();
    (result, format!("task-{i}"))
}

fn s1_job() -> Vec<(Vec<f64>, String)> {
    (0..S1_TASKS).into_par_iter().map(s1_task).collect()
}

fn small_objects_job() -> usize {
    (0..256usize)
        .into_par_iter()
        .map(|t| {
            let map: BTreeMap<String, Vec<u8>> = (0..200usize)
                .map(|k| (format!("key-{t}-{k}"), vec![(k % 251) as u8 + 1; 64]))
                .collect();
            map.values().map(Vec::len).sum::<usize>()
        })
        .sum()
}

fn pools() -> (rayon::ThreadPool, ArenaPool) {
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(THREADS)
        .build()
        .expect("rayon pool");
    let pool = ArenaPool::builder()
        .num_threads(THREADS)
        .build()
        .expect("arena pool");
    (rayon, pool)
}

fn s1(c: &mut Criterion) {
    let (rayon, pool) = pools();
    let mut group = c.benchmark_group("s1");
    group.sample_size(20);
    // Plain rayon reuses the pages its allocator kept from the previous iteration.
    group.bench_function("rayon/warm", |b| {
        b.iter_batched(|| (), |()| rayon.install(s1_job), BatchSize::PerIteration)
    });
    // Plain rayon from a heap that has given its pages back, like a first phase.
    group.bench_function("rayon/cold", |b| {
        b.iter_batched(
            || drop(arenapool_alloc::trim()),
            |()| rayon.install(s1_job),
            BatchSize::PerIteration,
        )
    });
    // By default the pool starts each job from given-back pages: that is its purpose.
    group.bench_function("arenapool", |b| {
        b.iter_batched(|| (), |()| pool.run(s1_job), BatchSize::PerIteration)
    });
    // With `keep_warm`, the same job run back to back reuses the pages the previous
    // one's results held (the results are dropped between iterations).
    let warm = ArenaPool::builder()
        .num_threads(THREADS)
        .keep_warm(Duration::from_secs(1))
        .build()
        .expect("arena pool");
    group.bench_function("arenapool/keep_warm", |b| {
        b.iter_batched(|| (), |()| warm.run(s1_job), BatchSize::PerIteration)
    });
    group.finish();
}

fn empty_job(c: &mut Criterion) {
    let (rayon, pool) = pools();
    let mut group = c.benchmark_group("empty_job");
    group.bench_function("rayon/install", |b| {
        b.iter(|| rayon.install(|| black_box(1)))
    });
    group.bench_function("arenapool/run", |b| b.iter(|| pool.run(|| black_box(1))));
    group.finish();
}

/// A job of 8 tiny tasks, each with 2–5 KB of scratch (the S3 loop's job).
fn tiny_job(j: u64) -> u64 {
    (0..8u64)
        .into_par_iter()
        .map(|t| {
            let scratch = vec![(t + 1) as u8; 2048 + ((j + t) % 7) as usize * 512];
            scratch.iter().map(|&b| u64::from(b)).sum::<u64>()
        })
        .sum()
}

fn tiny_jobs(c: &mut Criterion) {
    let (rayon, pool) = pools();
    let mut group = c.benchmark_group("tiny_job");
    group.bench_function("rayon/install", |b| {
        let mut j = 0;
        b.iter(|| {
            j += 1;
            rayon.install(|| tiny_job(j))
        })
    });
    group.bench_function("arenapool/run", |b| {
        let mut j = 0;
        b.iter(|| {
            j += 1;
            pool.run(|| tiny_job(j))
        })
    });
    group.finish();
}

/// A job whose 8 tasks return 64 KiB each.
fn results_job(j: u64) -> Vec<Vec<u8>> {
    (0..8u64)
        .into_par_iter()
        .map(|t| vec![(j + t) as u8; 64 << 10])
        .collect()
}

fn wide(c: &mut Criterion) {
    let mut group = c.benchmark_group("wide");
    for workers in [2, 32, 128] {
        let rayon = rayon::ThreadPoolBuilder::new()
            .num_threads(workers)
            .build()
            .expect("rayon pool");
        let pool = ArenaPool::builder()
            .num_threads(workers)
            .build()
            .expect("arena pool");
        let mut j = 0;
        group.bench_function(format!("tiny/{workers}/rayon"), |b| {
            b.iter(|| {
                j += 1;
                rayon.install(|| tiny_job(j))
            })
        });
        group.bench_function(format!("tiny/{workers}/arenapool"), |b| {
            b.iter(|| {
                j += 1;
                pool.run(|| tiny_job(j))
            })
        });
        // The results are dropped inside the timing, as between a program's jobs.
        group.bench_function(format!("results/{workers}/rayon"), |b| {
            b.iter(|| {
                j += 1;
                drop(rayon.install(|| results_job(j)))
            })
        });
        group.bench_function(format!("results/{workers}/arenapool"), |b| {
            b.iter(|| {
                j += 1;
                drop(pool.run(|| results_job(j)))
            })
        });
    }
    group.finish();
}

fn small_objects(c: &mut Criterion) {
    let (rayon, pool) = pools();
    let mut group = c.benchmark_group("small_objects");
    group.bench_function("rayon", |b| {
        b.iter_batched(
            || (),
            |()| rayon.install(small_objects_job),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("arenapool", |b| {
        b.iter_batched(
            || (),
            |()| pool.run(small_objects_job),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = s1, empty_job, tiny_jobs, small_objects, wide
}
criterion_main!(benches);
