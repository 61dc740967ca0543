//! What a child made by `fork` inherits: a phase open in the parent is not open in the
//! child (and dropping the parent's guard there ends nothing), a pool built in the
//! parent refuses work with a message that says so, and the child's own phase, scope
//! and pool work, and its idle return gives back what it frees. The forking thread's
//! own scope goes on in the child. Alone in its binary: its child inherits the whole
//! process.

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

/// The child's checks, each with the exit code that says it failed.
fn child(parent_phase: arenapool::PhaseGuard, parent_pool: &arenapool::ArenaPool) -> i32 {
    if arenapool::phase_is_open() || parent_phase.is_open() {
        return 10;
    }
    // Ends nothing in the child.
    drop(parent_phase);
    // The child's own phase opens, routes and ends.
    let guard = arenapool::enter_phase();
    if !guard.is_open() || !arenapool::phase_is_open() {
        return 11;
    }
    let (made, report) = arenapool::phase_report(|| vec![vec![3u8; 1 << 20]; 32]);
    if made.iter().any(|b| b[0] != 3 || b[(1 << 20) - 1] != 3) {
        return 12;
    }
    drop(guard);
    if arenapool::phase_is_open() || report.arenas.is_empty() {
        return 13;
    }
    // The parent's pool says why it cannot run.
    panic::set_hook(Box::new(|_| {}));
    let refused = panic::catch_unwind(AssertUnwindSafe(|| parent_pool.run(|| 1)));
    let _ = panic::take_hook();
    match refused {
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_default();
            if !message.contains("child made by fork") || !message.contains("new ArenaPool") {
                return 14;
            }
        }
        Ok(_) => return 15,
    }
    // A new pool works.
    let Ok(pool) = arenapool::ArenaPool::builder().num_threads(2).build() else {
        return 16;
    };
    let sum: u64 = pool.run(|| (0..1000u64).into_par_iter().sum());
    if sum != 499_500 {
        return 17;
    }
    // The idle return runs in the child too (the parent's thread is not there): memory
    // freed in jemalloc's own arenas, on a thread of the child's, goes back while the
    // child waits.
    let start = arenapool::memory().resident;
    let strings = std::thread::spawn(|| {
        (0..2_000_000)
            .map(|i| format!("row-{i:012}"))
            .collect::<Vec<String>>()
    })
    .join()
    .unwrap();
    if arenapool::memory().resident < start + (32 << 20) {
        return 21;
    }
    // Dropped on this thread, which is in a scope: the frees go to the strings' arena.
    drop(strings);
    let waited = Instant::now();
    while arenapool::memory().resident > start + (16 << 20) {
        if waited.elapsed() > Duration::from_secs(30) {
            return 19;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if arenapool::idle_return().is_none() {
        return 20;
    }
    0
}

#[test]
fn a_child_inherits_no_phase_and_no_pool_threads() {
    let pool = arenapool::ArenaPool::builder()
        .num_threads(2)
        .build()
        .expect("a pool");
    assert_eq!(pool.run(|| (0..10u64).into_par_iter().sum::<u64>()), 45);
    let phase = arenapool::enter_phase();
    assert!(phase.is_open());
    // The forking thread is inside a scope: it goes on in the child.
    let code = arenapool::with_arena(|| {
        let before = arenapool::current_arena();
        // SAFETY: the child runs only `child` and the end of the scope, then `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let mut code = child(phase, &pool);
            if code == 0 && arenapool::current_arena() != before {
                code = 18;
            }
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
        let started = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: `pid` is our child; `status` a valid out-pointer.
            let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if rc == pid {
                assert!(libc::WIFEXITED(status), "the child was killed: {status}");
                break (libc::WEXITSTATUS(status), phase);
            }
            if started.elapsed() > Duration::from_secs(60) {
                // SAFETY: our child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child hung");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let (code, phase) = code;
    assert_eq!(code, 0, "the child failed check {code}");
    // In the parent, the phase is still open, and the pool still works.
    assert!(phase.is_open() && arenapool::phase_is_open());
    drop(phase);
    assert!(!arenapool::phase_is_open());
    assert_eq!(pool.run(|| (0..10u64).into_par_iter().sum::<u64>()), 45);
}
