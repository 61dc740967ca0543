//! More simultaneously live arenas than jemalloc allows is a clear error, never an
//! abort; `with_arena` then runs unscoped; dropping arenas makes them available again.
//! Alone in its binary: it exhausts the process's arenas.
use arenapool_alloc::{with_arena, with_arena_report, Arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// jemalloc's arenas so far (`arenas.narenas`): its automatic ones (four per CPU unless
/// configured, as `narenas:512` on 128 CPUs) and the manual ones.
fn jemalloc_arenas() -> usize {
    tikv_jemalloc_ctl::arenas::narenas::read().expect("arenas.narenas") as usize
}

/// jemalloc's limit of arenas per process, which its error message names.
const LIMIT: usize = 4095;

#[test]
fn arena_limit_is_an_error_and_recovers() {
    // Those there before any of arenapool's: jemalloc's own, as many as the machine's
    // CPUs make.
    let before = jemalloc_arenas();
    let mut arenas = Vec::new();
    let err = loop {
        match Arena::new() {
            Ok(a) => arenas.push(a),
            Err(e) => break e,
        }
        assert!(arenas.len() <= LIMIT, "more arenas than jemalloc's limit");
    };
    eprintln!("{} arenas alive, then: {err}", arenas.len());
    assert!(err.is_arena_limit(), "{err}");
    assert!(!err.is_not_installed());
    // Every arena jemalloc has room for, but the one `arenas.create` cannot fill
    // (see the recycler), went to `Arena::new`.
    assert!(
        arenas.len() + before >= LIMIT - 1,
        "only {} arenas beside jemalloc's {before}",
        arenas.len()
    );
    let msg = err.to_string();
    assert!(msg.contains("4095") && msg.contains("drop"), "{msg}");

    // Scopes still run, unscoped.
    assert_eq!(with_arena(|| vec![7u8; 1000].len()), 1000);
    let (v, report) = with_arena_report(|| 42);
    assert_eq!(v, 42);
    assert!(report.arenas.is_empty());
    assert!(arenapool_alloc::try_with_arena(|| ())
        .unwrap_err()
        .is_arena_limit());

    // Every arena keeps working while all are alive.
    let last = arenas.last().unwrap();
    assert_eq!(last.enter(|| vec![1u32; 4096].iter().sum::<u32>()), 4096);

    // One dropped: one available again, and it is the same arena, recycled.
    let freed = arenas.pop().unwrap();
    let index = freed.index();
    drop(freed);
    let again = Arena::new().expect("a dropped arena is available again");
    assert_eq!(again.index(), index);
    assert!(Arena::new().unwrap_err().is_arena_limit());
    drop(again);
    drop(arenas);
    assert_eq!(arenapool_alloc::live_arenas(), 0);
    assert!(with_arena(arenapool_alloc::current_arena).is_some());
}
