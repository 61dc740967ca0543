//! Micro-benchmarks of the allocator and of scopes.
//!
//! - `hot_path/*`: alloc + free through `ArenaAlloc` and through plain
//!   `tikv_jemallocator::Jemalloc`, same binary, same run (goal: ratio <= 1.02).
//! - `scope/empty_with_arena`: the fixed cost of a scope (goal: <= 2 us).
//! - `purge/*`: giving 64 MiB of freed pages back, via `Arena::purge` and via a raw
//!   `madvise(MADV_DONTNEED)` of the same size (goal: arena >= 0.8x raw throughput).
use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::time::{Duration, Instant};

use arenapool_alloc::{with_arena, Arena, ArenaAlloc};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tikv_jemallocator::Jemalloc;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

fn alloc_free<A: GlobalAlloc>(a: &A, layout: Layout) {
    // SAFETY: `layout` has a non-zero size; the block is freed with the same allocator
    // and layout it was allocated with.
    unsafe {
        let p = a.alloc(layout);
        assert!(!p.is_null());
        p.write(1);
        a.dealloc(black_box(p), layout);
    }
}

fn hot_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    for size in [64usize, 4 << 10, 400 << 10] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        group.bench_with_input(BenchmarkId::new("Jemalloc", size), &layout, |b, &l| {
            b.iter(|| alloc_free(&Jemalloc, l))
        });
        group.bench_with_input(BenchmarkId::new("ArenaAlloc", size), &layout, |b, &l| {
            b.iter(|| alloc_free(&ArenaAlloc, l))
        });
    }
    group.finish();
}

fn scope(c: &mut Criterion) {
    let mut group = c.benchmark_group("scope");
    group.bench_function("empty_with_arena", |b| {
        b.iter(|| with_arena(|| black_box(1)))
    });
    // One allocation that escapes the scope and is freed outside it.
    group.bench_function("with_arena_one_alloc", |b| {
        b.iter(|| with_arena(|| black_box(Box::new(1u64))))
    });
    let arena = Arena::new().expect("ArenaAlloc is the global allocator");
    group.bench_function("empty_enter", |b| b.iter(|| arena.enter(|| black_box(1))));
    group.finish();
}

const PURGE_SIZE: usize = 64 << 20;

/// Time to purge `PURGE_SIZE` freed bytes from an arena. The purge runs while the
/// thread is still bound: leaving the arena would let jemalloc purge it first.
fn arena_purge(iters: u64) -> Duration {
    let arena = Arena::new().expect("ArenaAlloc is the global allocator");
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        arena.enter(|| {
            // Freed in 1 MiB blocks: a realistic mix of extents, all dirty.
            let blocks: Vec<Vec<u8>> = (0..PURGE_SIZE >> 20).map(|_| vec![1u8; 1 << 20]).collect();
            drop(black_box(blocks));
            let started = Instant::now();
            let returned = arena.purge().expect("purge");
            total += started.elapsed();
            assert!(returned >= PURGE_SIZE, "purged {returned}");
        });
    }
    total
}

/// Time to `madvise(MADV_DONTNEED)` `PURGE_SIZE` touched bytes of a private mapping.
fn raw_madvise(iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    // SAFETY: an anonymous private mapping of PURGE_SIZE bytes, written and advised only
    // within its bounds, and unmapped at the end.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            PURGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        for _ in 0..iters {
            std::ptr::write_bytes(p.cast::<u8>(), 1, PURGE_SIZE);
            let started = Instant::now();
            assert_eq!(libc::madvise(p, PURGE_SIZE, libc::MADV_DONTNEED), 0);
            total += started.elapsed();
        }
        libc::munmap(p, PURGE_SIZE);
    }
    total
}

fn purge(c: &mut Criterion) {
    let mut group = c.benchmark_group("purge");
    group.throughput(Throughput::Bytes(PURGE_SIZE as u64));
    group.sample_size(20);
    group.bench_function("arena_purge_64MiB", |b| b.iter_custom(arena_purge));
    group.bench_function("raw_madvise_64MiB", |b| b.iter_custom(raw_madvise));
    group.finish();
}

criterion_group!(benches, hot_path, scope, purge);
criterion_main!(benches);
