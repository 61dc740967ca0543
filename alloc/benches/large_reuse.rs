//! A large buffer allocated, written and freed in a loop outside phases, for sizes from
//! 1 to 64 MiB: minor page faults per block and time per block, through `ArenaAlloc`,
//! through `RawAlloc` (the allocator of the Python package's hooks) and through glibc's
//! `malloc`, in the same run. Goal: `ArenaAlloc` and `RawAlloc` fault no more than glibc
//! and take no longer (a block freed outside phases is kept for reuse, not given back
//! and faulted in again at the next use).
//!
//! `cargo bench -p arenapool-alloc --bench large_reuse` (`-- --rounds N`, 50 by default).
//! Faults are counted on the measuring thread (`RUSAGE_THREAD`): no noise moves them.
//! Times are the median of the rounds, with the smallest and largest.
use std::hint::black_box;
use std::time::Instant;

use arenapool_alloc::{ArenaAlloc, RawAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const MIB: usize = 1 << 20;
const SIZES_MIB: [usize; 8] = [1, 2, 4, 7, 8, 16, 32, 64];

/// This thread's minor page faults so far.
fn faults() -> i64 {
    // SAFETY: an all-zero `rusage` is a valid value for `getrusage` to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `rusage` to fill, for the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0);
    usage.ru_minflt
}

/// One allocator: allocates `size` bytes, frees a block it allocated with that size.
struct Contender {
    name: &'static str,
    alloc: fn(usize) -> *mut u8,
    free: fn(*mut u8, usize),
}

const CONTENDERS: [Contender; 3] = [
    Contender {
        name: "glibc malloc",
        // SAFETY: `malloc` with a non-zero size.
        alloc: |size| unsafe { libc::malloc(size) }.cast(),
        // SAFETY: a block of `malloc`'s, freed once.
        free: |block, _| unsafe { libc::free(block.cast()) },
    },
    Contender {
        name: "ArenaAlloc",
        alloc: |size| {
            let mut v = Vec::<u8>::with_capacity(size);
            let block = v.as_mut_ptr();
            std::mem::forget(v);
            block
        },
        // SAFETY: the block was the buffer of a `Vec<u8>` of this capacity, forgotten.
        free: |block, size| drop(unsafe { Vec::from_raw_parts(block, 0, size) }),
    },
    Contender {
        name: "RawAlloc",
        alloc: |size| RawAlloc::alloc(size, 16),
        // SAFETY: a block of `RawAlloc`'s, freed once.
        free: |block, _| unsafe { RawAlloc::free(block) },
    },
];

/// `rounds` rounds of allocate, write every page, free, after one that warms up:
/// faults per block, and each round's time in ms.
fn measure(contender: &Contender, size: usize, rounds: usize) -> (f64, Vec<f64>) {
    let round = || {
        let block = (contender.alloc)(size);
        assert!(!block.is_null());
        // SAFETY: the block holds `size` bytes.
        unsafe { block.write_bytes(1, size) };
        (contender.free)(black_box(block), size);
    };
    round();
    let before = faults();
    let times = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            round();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ((faults() - before) as f64 / rounds as f64, times)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut rounds = 50;
    while let Some(arg) = args.next() {
        if arg == "--rounds" {
            rounds = args.next().and_then(|n| n.parse().ok()).unwrap_or(rounds);
        }
    }
    println!("a block allocated, written and freed {rounds} times outside phases; faults per block, ms per block (median, range)");
    println!();
    print!("| block |");
    for c in &CONTENDERS {
        print!(" {}: faults | {}: ms |", c.name, c.name);
    }
    println!();
    println!("|---|{}", "---|---|".repeat(CONTENDERS.len()));
    for mib in SIZES_MIB {
        print!("| {mib} MiB |");
        for c in &CONTENDERS {
            let (faults, mut times) = measure(c, mib * MIB, rounds);
            times.sort_by(f64::total_cmp);
            print!(
                " {faults:.0} | {:.2} ({:.2}–{:.2}) |",
                times[times.len() / 2],
                times[0],
                times[times.len() - 1]
            );
        }
        println!();
    }
}
