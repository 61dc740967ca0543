//! Without `ArenaAlloc` as the global allocator, `Arena::new` says how to install it,
//! and `with_arena` still runs the closure. (No `#[global_allocator]` here: this test
//! binary runs under the system allocator.)
use arenapool_alloc::{is_installed, try_with_arena, with_arena, with_arena_report, Arena};

#[test]
fn not_installed_is_a_clear_error_and_scopes_still_run() {
    assert!(!is_installed());
    let err = Arena::new().unwrap_err();
    assert!(err.is_not_installed());
    assert!(!err.is_arena_limit());
    let msg = err.to_string();
    assert!(
        msg.contains("#[global_allocator]") && msg.contains("arenapool::ArenaAlloc"),
        "{msg}"
    );

    assert_eq!(with_arena(|| vec![1u8; 100].len()), 100);
    let (v, report) = with_arena_report(|| String::from("ran"));
    assert_eq!(v, "ran");
    assert!(report.arenas.is_empty());
    assert_eq!(report.returned, 0);
    assert!(try_with_arena(|| ()).unwrap_err().is_not_installed());
}
