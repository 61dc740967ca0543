//! One idle-return thread per process, however many threads race to start it: 64
//! threads at once call `set_idle_return`, open scopes (whose first one makes the
//! setting), allocate large blocks and ask `idle_return`, and the process then has
//! exactly one thread named `arenapool-idle`. The race is run in 100 fresh processes
//! (this test binary run again), since the thread starts once per process.
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use arenapool_alloc::{idle_return, set_idle_return, with_arena, ArenaAlloc};

mod common;
use common::thread_names;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const RACERS: usize = 64;
const RUNS: usize = 100;
const CHILD: &str = "ARENAPOOL_TEST_IDLE_RACE";
/// What the racers are named: a thread they start is named so until it names itself.
const RACER: &str = "racer";

/// In a child: the race, then the number of idle threads, printed.
fn race() {
    let barrier = Arc::new(Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|n| {
            let barrier = Arc::clone(&barrier);
            std::thread::Builder::new()
                .name(RACER.into())
                .spawn(move || {
                    barrier.wait();
                    match n % 4 {
                        0 => set_idle_return(Some(Duration::from_millis(500 + n as u64))),
                        1 => {
                            let n = with_arena(|| std::hint::black_box(vec![1u8; 1 << 20]).len());
                            assert_eq!(n, 1 << 20);
                        }
                        2 => drop(std::hint::black_box(vec![2u8; 1 << 20])),
                        _ => assert!(idle_return().is_some()),
                    }
                })
                .expect("a racer")
        })
        .collect();
    for racer in racers {
        racer.join().expect("a racer panicked");
    }
    // A thread a racer started carries the racer's name until it names itself.
    let started = Instant::now();
    while thread_names().iter().any(|name| name == RACER) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "a thread stayed unnamed: {:?}",
            thread_names()
        );
        std::thread::yield_now();
    }
    let idle = thread_names()
        .iter()
        .filter(|name| *name == "arenapool-idle")
        .count();
    println!("idle threads: {idle}");
}

#[test]
fn one_idle_thread_however_many_threads_start_it() {
    if std::env::var_os(CHILD).is_some() {
        race();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let mut counts = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "one_idle_thread_however_many_threads_start_it",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env_remove("ARENAPOOL_IDLE_RETURN")
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the child failed: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let count: usize = stdout
            .lines()
            .find_map(|line| line.split("idle threads: ").nth(1))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in the child's output:\n{stdout}"));
        counts.push(count);
    }
    let wrong: Vec<_> = counts.iter().enumerate().filter(|(_, &n)| n != 1).collect();
    assert!(
        wrong.is_empty(),
        "runs (index, idle threads) with other than one idle thread: {wrong:?}"
    );
}
