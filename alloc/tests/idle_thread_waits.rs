//! A program that only opens scopes, with no block of 16 KiB or more, keeps the threads
//! it has: the idle return's thread starts at the end of the first scope after the
//! allocator's large path is used (a second thread, even asleep, makes the C library
//! unlock every mutex with an atomic exchange: `alloc/src/policy/idle.rs`).
//!
//! Its own binary without the test harness, so that nothing allocated a large block
//! before `main` and no thread of the harness's runs.
use std::hint::black_box;
use std::time::{Duration, Instant};

use arenapool_alloc::{idle_return, with_arena, ArenaAlloc, IDLE_RETURN_ENV};

mod common;
use common::thread_names;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

fn main() {
    // The default setting: a delay of one second.
    std::env::remove_var(IDLE_RETURN_ENV);
    let before = thread_names();

    for i in 0..1000u32 {
        let sum = with_arena(|| {
            let scratch = black_box(vec![i; 1000]); // 4 KB: below the large path
            scratch.iter().map(|&x| u64::from(x)).sum::<u64>()
        });
        assert_eq!(sum, u64::from(i) * 1000);
        drop(black_box(with_arena(|| Box::new(i))));
    }
    assert_eq!(
        thread_names(),
        before,
        "2,000 scopes without a large block started a thread"
    );

    // The allocator's path never starts it: a large block only marks the path used.
    drop(black_box(vec![7u8; 64 << 10]));
    assert_eq!(thread_names(), before, "a large block started a thread");

    // The next scope's end does.
    drop(black_box(with_arena(|| Box::new(1u8))));
    let started = Instant::now();
    while !thread_names().iter().any(|name| name == "arenapool-idle") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no idle thread after a scope that followed a large block: {:?}",
            thread_names()
        );
        std::thread::yield_now();
    }
    assert_eq!(
        thread_names().len(),
        before.len() + 1,
        "{:?}",
        thread_names()
    );
    assert_eq!(idle_return(), Some(Duration::from_secs(1)));
    println!("idle_thread_waits: ok");
}
