//! The worst case of what a worker's thread cache keeps resident between jobs: every
//! cached object alone in its slab.
//!
//! In a job, each worker fills, for every small size class, as many slabs as its cache
//! holds objects of that class, frees all objects but one per slab, then frees those
//! last ones: they go into the cache, each keeping its slab in use. It also frees as
//! many objects of each cached large class as the cache holds. After the job RSS must
//! stay within `thread_cache_worst_case()` per worker, which this test also computes on
//! its own from jemalloc's figures (slab sizes, objects per slab, cache sizes), and it
//! must exceed the typical 8 MiB per worker (or the test would measure nothing). Alone
//! in its binary: it measures process RSS.
// The test reads jemalloc's size classes itself, apart from the crate's `ctl` module,
// to check the crate's figure against its own.
#![allow(clippy::disallowed_methods)]

use arenapool_alloc::{rss, thread_cache_worst_case, Bytes};
use arenapool_pool::ArenaPool;
use tikv_jemalloc_ctl::raw;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const THREADS: usize = 2;
/// The typical bound per worker (docs/design.md, and the test `worker_caches`).
const TYPICAL: usize = 8 << 20;

/// A small size class: its object size, objects per slab, slab size, and how many
/// objects a thread's cache holds.
#[derive(Debug, Clone, Copy)]
struct Class {
    size: usize,
    nregs: usize,
    slab: usize,
    cached: usize,
}

fn read<T: Copy>(name: &str) -> T {
    let name = format!("{name}\0");
    // SAFETY: each name read here is a mallctl of type `T`, as jemalloc documents it.
    unsafe { raw::read::<T>(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// How many objects of a small class with `nregs` objects per slab the cache holds:
/// jemalloc's rule (`tcache_ncached_max_compute`), from its options.
fn cached_small(nregs: usize) -> usize {
    let even_up = |n: usize| n + n % 2;
    let min = even_up(read::<u32>("opt.tcache_nslots_small_min") as usize).max(2);
    let max = (read::<u32>("opt.tcache_nslots_small_max") as usize & !1).max(2);
    let mul = read::<isize>("opt.lg_tcache_nslots_mul");
    let candidate = even_up(if mul < 0 { nregs >> -mul } else { nregs << mul });
    candidate.clamp(min.min(max), max)
}

fn small_classes() -> Vec<Class> {
    let nbins = read::<u32>("arenas.nbins");
    (0..nbins)
        .map(|i| {
            let nregs = read::<u32>(&format!("arenas.bin.{i}.nregs")) as usize;
            Class {
                size: read::<usize>(&format!("arenas.bin.{i}.size")),
                nregs,
                slab: read::<usize>(&format!("arenas.bin.{i}.slab_size")),
                cached: cached_small(nregs),
            }
        })
        .collect()
}

/// The cached large classes: sizes above the small ones up to `arenas.tcache_max`.
fn large_classes() -> Vec<usize> {
    let tcache_max = read::<usize>("arenas.tcache_max");
    let nlextents = read::<u32>("arenas.nlextents");
    (0..nlextents)
        .map(|i| read::<usize>(&format!("arenas.lextent.{i}.size")))
        .take_while(|&size| size <= tcache_max)
        .collect()
}

/// What one worker's cache can keep resident at most: each cached small object alone
/// in its slab, and each cached large object.
fn worst_case(small: &[Class], large: &[usize]) -> usize {
    let nslots_large = read::<u32>("opt.tcache_nslots_large") as usize;
    small.iter().map(|c| c.cached * c.slab).sum::<usize>()
        + large.iter().map(|size| nslots_large * size).sum::<usize>()
}

/// The allocation pattern, on the calling worker.
fn pin_slabs(small: &[Class], large: &[usize]) {
    for class in small {
        let mut objects: Vec<Vec<u8>> = (0..class.cached * class.nregs)
            .map(|i| vec![(i % 251) as u8 + 1; class.size])
            .collect();
        // Slabs are filled in address order; one object per slab's worth of them.
        objects.sort_by_key(|o| o.as_ptr() as usize);
        let mut last = Vec::with_capacity(class.cached);
        for (i, object) in objects.into_iter().enumerate() {
            if i % class.nregs == 0 {
                last.push(object);
            }
        }
        drop(last);
    }
    let nslots_large = read::<u32>("opt.tcache_nslots_large") as usize;
    for &size in large {
        let objects: Vec<Vec<u8>> = (0..nslots_large).map(|_| vec![1u8; size]).collect();
        drop(objects);
    }
}

#[test]
fn workers_keep_at_most_the_stated_worst_case_between_jobs() {
    let (small, large) = (small_classes(), large_classes());
    let worst = worst_case(&small, &large);
    assert_eq!(
        thread_cache_worst_case().expect("the crate's figure"),
        worst,
        "the crate's worst case differs from jemalloc's figures"
    );
    let pool = ArenaPool::builder().num_threads(THREADS).build().unwrap();
    pool.run(|| {
        rayon::broadcast(|_| drop(std::hint::black_box(vec![1u8; 1 << 20])));
    });
    let before = rss();
    pool.run(|| rayon::broadcast(|_| pin_slabs(&small, &large)));
    let after = rss();
    let kept = after.saturating_sub(before);
    eprintln!(
        "worker_caches_worst: {} small classes, {} cached large ones; worst case per \
         worker {}; RSS before {}, after the job {} (kept {}, {} per worker)",
        small.len(),
        large.len(),
        Bytes(worst),
        Bytes(before),
        Bytes(after),
        Bytes(kept),
        Bytes(kept / THREADS),
    );
    assert!(
        kept > THREADS * TYPICAL,
        "the pattern kept only {}: it does not reach the worst case",
        Bytes(kept)
    );
    // A few MiB over for what is not a cache: the job's own metadata, the test's.
    assert!(
        kept <= THREADS * worst + (4 << 20),
        "workers kept {} (bound {} per worker)",
        Bytes(kept),
        Bytes(worst)
    );
}
