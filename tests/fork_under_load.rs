//! `fork` while other threads open and end labelled phases (making their label under
//! the labels' lock each round), run pool jobs and scopes, and free large blocks: no
//! child waits for a lock of arenapool's held by a thread it does not have. Each child
//! makes a label, opens a phase under it, enters a scope and builds a new pool, checks
//! what they computed and exits 0; a child still running after its deadline counts as
//! hung (and is killed), so a hang fails the test instead of hanging it.
//!
//! Alone in its binary: its children inherit the whole process. The number of forks is
//! `ARENAPOOL_FORKS` (default 300).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

/// How long a child may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// Blocks of 1 MiB, each filled with its index: large enough for the phase arenas.
fn blocks(n: usize, seed: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| vec![seed.wrapping_add(i as u8); 1 << 20])
        .collect()
}

fn check(blocks: &[Vec<u8>], seed: u8) -> bool {
    blocks.iter().enumerate().all(|(i, block)| {
        let want = seed.wrapping_add(i as u8);
        block.first() == Some(&want) && block.last() == Some(&want)
    })
}

/// What each child does: a phase, a scope, a new pool; the exit code says what failed.
fn child() -> i32 {
    // The labels' lock is free in the child, and a new label is made.
    let Ok(label) = arenapool::Label::new("child") else {
        return 7;
    };
    let in_phase = label.phase(|| blocks(8, 1));
    if !check(&in_phase, 1) {
        return 2;
    }
    drop(in_phase);
    let in_scope = arenapool::with_arena(|| blocks(8, 2));
    if !check(&in_scope, 2) {
        return 3;
    }
    drop(in_scope);
    let Ok(pool) = arenapool::ArenaPool::builder().num_threads(2).build() else {
        return 4;
    };
    let sums = pool.run(|| {
        (0..16u64)
            .into_par_iter()
            .map(|i| vec![i; 1 << 15].iter().sum::<u64>())
            .collect::<Vec<u64>>()
    });
    if sums
        .iter()
        .enumerate()
        .any(|(i, &s)| s != i as u64 * (1 << 15))
    {
        return 5;
    }
    drop(pool);
    if arenapool::phase_is_open() {
        return 6;
    }
    0
}

/// How a child ended.
enum End {
    Exited(i32),
    Signalled(i32),
    Hung,
}

fn wait_for(pid: libc::pid_t) -> End {
    let started = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `pid` is a child of this process; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return if libc::WIFEXITED(status) {
                End::Exited(libc::WEXITSTATUS(status))
            } else {
                End::Signalled(libc::WTERMSIG(status))
            };
        }
        assert!(
            rc == 0,
            "waitpid failed: {}",
            std::io::Error::last_os_error()
        );
        if started.elapsed() > DEADLINE {
            // SAFETY: `pid` is our child, not yet reaped: signalling it cannot reach
            // another process.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return End::Hung;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn children_forked_under_load_never_hang() {
    let forks: usize = std::env::var("ARENAPOOL_FORKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let stop = Arc::new(AtomicBool::new(false));
    let pool = Arc::new(
        arenapool::ArenaPool::builder()
            .num_threads(2)
            .build()
            .expect("a pool"),
    );
    // Every load thread has run once before the first fork.
    let started = Arc::new(Barrier::new(5));
    let mut load = Vec::new();
    // Phases opened and ended, blocks made in them and freed after.
    for seed in [10u8, 20] {
        let (stop, started) = (stop.clone(), started.clone());
        load.push(thread::spawn(move || {
            let mut first = true;
            while first || !stop.load(Ordering::Relaxed) {
                // Each label is looked up under the labels' lock, on every round.
                let label = arenapool::Label::new(&format!("load-{seed}")).expect("a label");
                let made = label.phase(|| blocks(4, seed));
                assert!(check(&made, seed));
                drop(made);
                if std::mem::take(&mut first) {
                    started.wait();
                }
            }
        }));
    }
    // Pool jobs.
    {
        let (stop, started, pool) = (stop.clone(), started.clone(), pool.clone());
        load.push(thread::spawn(move || {
            let mut first = true;
            while first || !stop.load(Ordering::Relaxed) {
                let made = pool.run(|| {
                    (0..4)
                        .into_par_iter()
                        .map(|i| vec![i as u8; 1 << 20])
                        .collect::<Vec<_>>()
                });
                assert_eq!(made.len(), 4);
                drop(made);
                if std::mem::take(&mut first) {
                    started.wait();
                }
            }
        }));
    }
    // Scopes, whose blocks are freed after the scope, into its idle arena.
    {
        let (stop, started) = (stop.clone(), started.clone());
        load.push(thread::spawn(move || {
            let mut first = true;
            while first || !stop.load(Ordering::Relaxed) {
                let made = arenapool::with_arena(|| blocks(4, 30));
                assert!(check(&made, 30));
                drop(made);
                if std::mem::take(&mut first) {
                    started.wait();
                }
            }
        }));
    }
    started.wait();

    // The forks, from a thread of their own.
    let forker = thread::spawn(move || {
        let mut ends = Vec::with_capacity(forks);
        for _ in 0..forks {
            // SAFETY: the child only runs `child`, which uses arenapool, the allocator
            // and threads of its own, then leaves with `_exit` (no exit handlers of the
            // parent's, no unwinding into the parent's frames).
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let code = std::panic::catch_unwind(child).unwrap_or(7);
                // SAFETY: ends the child at once, as a child of a multithreaded process
                // should.
                unsafe { libc::_exit(code) };
            }
            assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
            ends.push(wait_for(pid));
        }
        ends
    });
    let ends = forker.join().expect("the forking thread");
    stop.store(true, Ordering::Relaxed);
    for thread in load {
        thread.join().expect("a load thread");
    }

    let hung = ends.iter().filter(|e| matches!(e, End::Hung)).count();
    let failed: Vec<String> = ends
        .iter()
        .filter_map(|e| match e {
            End::Exited(0) | End::Hung => None,
            End::Exited(code) => Some(format!("exit {code}")),
            End::Signalled(signal) => Some(format!("signal {signal}")),
        })
        .collect();
    eprintln!(
        "{} forks: {hung} hung, {} failed {failed:?}",
        ends.len(),
        failed.len()
    );
    assert_eq!(hung, 0, "{hung} of {} children hung", ends.len());
    assert!(failed.is_empty(), "children failed: {failed:?}");
}
