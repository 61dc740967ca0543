//! Under jemalloc's `percpu_arena` option threads cannot be bound to arenas of their
//! own: `Arena::new` says so and what to change, scopes run unscoped, and no thread is
//! left bound. jemalloc reads its options at start-up, so the test re-runs this binary
//! with the option set in its environment.
use std::process::Command;

use arenapool_alloc::{current_arena, try_with_arena, with_arena, with_arena_report, Arena};

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const CHILD: &str = "ARENAPOOL_TEST_PERCPU_CHILD";
const TEST: &str = "percpu_arena_is_a_clear_error_and_scopes_run_unscoped";

#[test]
fn percpu_arena_is_a_clear_error_and_scopes_run_unscoped() {
    if std::env::var_os(CHILD).is_none() {
        let output = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture"])
            .env(CHILD, "1")
            .env("_RJEM_MALLOC_CONF", "percpu_arena:percpu")
            .output()
            .expect("re-run the test binary");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "child failed:\n{stdout}\n{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
        return;
    }

    let err = Arena::new().unwrap_err();
    assert!(err.is_percpu_arena(), "{err}");
    assert!(!err.is_not_installed() && !err.is_arena_limit());
    let msg = err.to_string();
    assert!(
        msg.contains("percpu_arena") && msg.contains("_RJEM_MALLOC_CONF"),
        "{msg}"
    );

    assert_eq!(with_arena(|| vec![1u8; 4096].len()), 4096);
    assert_eq!(current_arena(), None);
    let (v, report) = with_arena_report(|| 7);
    assert_eq!(v, 7);
    assert!(report.arenas.is_empty());
    assert!(try_with_arena(|| ()).unwrap_err().is_percpu_arena());
    assert_eq!(current_arena(), None);
}
