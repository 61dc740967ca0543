//! Behaviour of scopes, bindings and arenas that does not depend on process RSS: these
//! tests may share a process.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use arenapool_alloc::{
    current_arena, is_installed, memory, trim, try_with_arena, with_arena, with_arena_report,
    Arena, ArenaAlloc,
};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn installed() {
    assert!(is_installed());
}

#[test]
fn scopes_nest_and_restore_the_previous_binding() {
    assert_eq!(current_arena(), None);
    let (outer, inner, outer_again) = with_arena(|| {
        let outer = current_arena().unwrap();
        let inner = with_arena(|| current_arena().unwrap());
        (outer, inner, current_arena().unwrap())
    });
    assert_ne!(outer, inner);
    assert_eq!(outer, outer_again);
    assert_eq!(current_arena(), None);
}

#[test]
fn a_panic_leaves_no_thread_bound() {
    let result = catch_unwind(|| {
        with_arena(|| {
            let _scratch = vec![1u8; 1 << 20];
            with_arena(|| panic!("inside two scopes"));
        })
    });
    assert!(result.is_err());
    assert_eq!(current_arena(), None);

    let arena = Arena::new().unwrap();
    let result = catch_unwind(AssertUnwindSafe(|| arena.enter(|| panic!("inside enter"))));
    assert!(result.is_err());
    assert_eq!(current_arena(), None);
    // The arena is still usable afterwards.
    assert_eq!(arena.enter(current_arena), Some(arena.index()));
}

#[test]
fn bind_and_bind_shared_bind_until_dropped() {
    let arena = Arena::new().unwrap();
    {
        let binding = arena.bind();
        assert!(binding.is_bound());
        assert_eq!(binding.arena_index(), arena.index());
        assert_eq!(current_arena(), Some(arena.index()));
    }
    assert_eq!(current_arena(), None);

    let shared = Arc::new(Arena::new().unwrap());
    let index = shared.index();
    let binding = shared.bind_shared();
    drop(shared); // the binding keeps the arena alive
    assert_eq!(current_arena(), Some(index));
    let v = vec![5u8; 100_000];
    drop(binding);
    assert_eq!(current_arena(), None);
    assert_eq!(v.iter().map(|&b| b as usize).sum::<usize>(), 500_000);
}

#[test]
fn bindings_dropped_out_of_order_leave_the_thread_unbound() {
    let (a, b, c) = (
        Arena::new().unwrap(),
        Arena::new().unwrap(),
        Arena::new().unwrap(),
    );
    let ga = a.bind();
    let gb = b.bind();
    drop(ga); // out of order: `b` stays in force
    assert_eq!(current_arena(), Some(b.index()));
    let gc = c.bind();
    drop(gc); // in order again: back to `b`
    assert_eq!(current_arena(), Some(b.index()));
    drop(gb); // the last one: back to the thread's own arena
    assert_eq!(current_arena(), None);

    // Three deep, the middle one first.
    let ga = a.bind();
    let gb = b.bind();
    let gc = c.bind();
    drop(gb);
    drop(gc);
    drop(ga);
    assert_eq!(current_arena(), None);
}

#[test]
fn other_threads_are_not_bound() {
    with_arena(|| {
        assert!(current_arena().is_some());
        let on_other = std::thread::spawn(current_arena).join().unwrap();
        assert_eq!(on_other, None);
    });
}

/// Contract 4: an arena that may hold live data is purged, never reset or destroyed.
/// Data that escaped survives its arena being reused, purged, released and recycled.
#[test]
fn escaped_data_survives_reuse_purges_and_recycling() {
    let arena = Arena::new().unwrap();
    let escaped: Vec<Vec<u64>> = arena.enter(|| (0..64).map(|i| vec![i; 10_000]).collect());
    let small: Vec<String> = arena.enter(|| (0..10_000).map(|i| i.to_string()).collect());
    for round in 0..100u64 {
        // The same arena, reused for churn and purged while the data lives in it.
        arena.enter(|| {
            let churn: Vec<Vec<u64>> = (0..16).map(|i| vec![round + i; 5_000]).collect();
            drop(churn);
            arena.purge().unwrap();
        });
        arena.purge().unwrap();
        trim().unwrap();
    }
    drop(arena); // released with live data: recycled, never reset
    for round in 0..100u64 {
        with_arena(|| drop(std::hint::black_box(vec![round; 50_000])));
        trim().unwrap();
    }
    for (i, v) in escaped.iter().enumerate() {
        assert!(
            v.iter().all(|&x| x == i as u64),
            "escaped vector {i} changed"
        );
    }
    for (i, s) in small.iter().enumerate() {
        assert_eq!(*s, i.to_string());
    }
}

#[test]
fn try_with_arena_runs_in_an_arena() {
    let inside = try_with_arena(current_arena).unwrap();
    assert!(inside.is_some());
}

#[test]
fn report_accounts_for_scratch_given_back() {
    let (sum, report) = with_arena_report(|| {
        let mut sum = 0u64;
        for i in 0..64u64 {
            let scratch = vec![i; 128 << 10]; // 1 MiB, touched, freed
            sum += scratch[1000];
        }
        let keep: Vec<Vec<u64>> = (0..32).map(|i| vec![i; 128 << 10]).collect();
        drop(keep); // 32 MiB freed at once
        sum
    });
    assert_eq!(sum, (0..64).sum::<u64>());
    assert_eq!(report.arenas.len(), 1);
    assert!(report.returned >= 32 << 20, "{report}");
    assert!(report.returned < 1 << 30, "{report}");
    assert!(report.rss_before > 0 && report.rss_after > 0);
    assert!(!report.to_string().contains('\n'));
}

#[test]
fn memory_snapshot_sees_live_allocations() {
    let held = vec![9u8; 64 << 20];
    let m = memory();
    assert!(m.allocated >= 64 << 20, "{m}");
    assert!(m.active >= m.allocated);
    assert!(m.resident >= 64 << 20);
    assert!(m.rss >= 64 << 20);
    assert!(m.peak_rss >= m.rss / 2);
    drop(held);
    assert!(trim().is_ok());
}

#[test]
fn arenas_and_bindings_are_debug() {
    let arena = Arena::new().unwrap();
    assert!(format!("{arena:?}").contains(&arena.index().to_string()));
    let binding = arena.bind();
    let shown = format!("{binding:?}");
    assert!(shown.contains("Binding") && shown.contains(&arena.index().to_string()));
}
