//! Micro-benchmarks of the allocator and of scopes.
//!
//! - `hot_path/*`: alloc + free through `ArenaAlloc` and through plain
//!   `tikv_jemallocator::Jemalloc`, same binary, same run (goal: ratio <= 1.02).
//! - `phase/64B/*`, `phase/64KiB/*`: the same on two threads at once, through
//!   `Jemalloc`, through `ArenaAlloc` with no phase open, and through `ArenaAlloc`
//!   inside a phase (where 64 KiB blocks go to the phase arenas). Goal: `ArenaAlloc`
//!   <= 1.02x `Jemalloc` with no phase; 64 KiB <= 1.05x `Jemalloc` inside a phase.
//! - `phase/end/*`: the fixed cost of a phase that does nothing: opened and ended
//!   (`empty`), and with its report (`empty_report`, what Python's `arenapool.phase()`
//!   takes), the phase arenas already made.
//! - `scope/*`: the fixed cost of a scope, empty or with one allocation that escapes
//!   it (goal: <= 1.3 us each), and of entering an arena held by hand.
//! - `large_reuse/16MiB/*`: a 16 MiB block allocated, touched (a byte a page) and freed
//!   in a loop outside any phase, through `ArenaAlloc`, plain `Jemalloc` and glibc's
//!   `System`: the cost of giving a reused block back and faulting it in again (goal:
//!   `ArenaAlloc` <= 1.05x the faster of the two).
//! - `purge/*`: giving 64 MiB of freed pages back, via `Arena::purge` and via a raw
//!   `madvise(MADV_DONTNEED)` of the same size (goal: arena >= 0.8x raw throughput).
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use arenapool_alloc::{
    enter_phase, phase_report, phase_threshold, with_arena, Arena, ArenaAlloc, RawAlloc,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tikv_jemallocator::Jemalloc;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// Never inlined, for every allocator alike: a program reaches its global allocator
/// through a call, and inlining one contender into the loop but not another (which
/// the compiler decides by their sizes) would measure the inlining.
#[inline(never)]
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

/// `iters` alloc + free pairs of `layout` through `a` on each of two threads, started
/// together; the slower thread's time. Each thread allocates once before the start, so
/// setting up its cache and arena is not timed.
fn two_threads<A: GlobalAlloc + Sync>(a: &A, layout: Layout, iters: u64) -> Duration {
    let start = Barrier::new(2);
    thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    alloc_free(a, layout);
                    start.wait();
                    let started = Instant::now();
                    for _ in 0..iters {
                        // An opaque size, as a program's sizes are: no size test of
                        // `ArenaAlloc`'s is decided at compile time.
                        alloc_free(a, black_box(layout));
                    }
                    started.elapsed()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .max()
            .expect("two threads")
    })
}

/// Whether a block of `layout` from `ArenaAlloc` lands in one of this crate's arenas.
fn routed(layout: Layout) -> bool {
    // SAFETY: `layout` has a non-zero size; the block is freed with the same allocator
    // and layout it was allocated with.
    unsafe {
        let p = ArenaAlloc.alloc(layout);
        assert!(!p.is_null());
        let ours = RawAlloc::owns(p);
        ArenaAlloc.dealloc(p, layout);
        ours
    }
}

fn phase(c: &mut Criterion) {
    for (name, size) in [("64B", 64usize), ("64KiB", 64 << 10)] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let mut group = c.benchmark_group(format!("phase/{name}"));
        group.bench_function("jemalloc", |b| {
            b.iter_custom(|iters| two_threads(&Jemalloc, layout, iters))
        });
        group.bench_function("arenapool", |b| {
            b.iter_custom(|iters| two_threads(&ArenaAlloc, layout, iters))
        });
        let phase = enter_phase();
        assert!(phase.is_open(), "no phase could be opened");
        // The case measures the path it is named for: only blocks from the threshold
        // up go to the phase arenas.
        assert_eq!(
            routed(layout),
            size >= phase_threshold(),
            "{name} in a phase"
        );
        group.bench_function("arenapool-in-phase", |b| {
            b.iter_custom(|iters| two_threads(&ArenaAlloc, layout, iters))
        });
        drop(phase);
        group.finish();
    }
    let mut group = c.benchmark_group("phase/end");
    group.bench_function("empty", |b| {
        b.iter(|| arenapool_alloc::phase(|| black_box(1)))
    });
    group.bench_function("empty_report", |b| b.iter(|| phase_report(|| black_box(1))));
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

const LARGE_SIZE: usize = 16 << 20;

/// Allocates a block of `layout` through `a`, writes a byte in each of its pages, and
/// frees it.
#[inline(never)]
fn alloc_touch_free<A: GlobalAlloc>(a: &A, layout: Layout) {
    // SAFETY: `layout` has a non-zero size; every write lies inside the block, which is
    // freed with the same allocator and layout it was allocated with.
    unsafe {
        let p = a.alloc(layout);
        assert!(!p.is_null());
        for offset in (0..layout.size()).step_by(4096) {
            p.add(offset).write(1);
        }
        a.dealloc(black_box(p), layout);
    }
}

fn large_reuse(c: &mut Criterion) {
    let layout = Layout::from_size_align(LARGE_SIZE, 8).unwrap();
    let mut group = c.benchmark_group("large_reuse/16MiB");
    group.bench_function("System", |b| b.iter(|| alloc_touch_free(&System, layout)));
    group.bench_function("Jemalloc", |b| {
        b.iter(|| alloc_touch_free(&Jemalloc, layout))
    });
    group.bench_function("ArenaAlloc", |b| {
        b.iter(|| alloc_touch_free(&ArenaAlloc, layout))
    });
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

criterion_group!(benches, hot_path, phase, scope, large_reuse, purge);
criterion_main!(benches);
