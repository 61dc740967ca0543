//! `stats`: what each kind of arena holds adds up to jemalloc's figures, and the running
//! totals move as work gives memory back.

use arenapool_alloc::{stats, Arena, ArenaAlloc, Label, Work};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const MIB: usize = 1 << 20;

/// The kinds' resident bytes, from the same refresh of jemalloc's statistics as its
/// own total, add up to it (the target: within 1%).
#[test]
fn resident_by_kind_adds_up_to_jemalloc_s() {
    let arena = Arena::new().expect("an arena");
    let kept: Vec<Vec<u8>> = arena.enter(|| (0..8).map(|_| vec![1u8; MIB]).collect());
    let s = stats();
    let by_kind: usize = s.by_kind().iter().map(|(_, held)| held.resident).sum();
    assert!(s.resident > 0);
    assert!(
        by_kind.abs_diff(s.resident) <= s.resident / 100,
        "kinds {by_kind}, jemalloc {}",
        s.resident
    );
    assert!(s.automatic.arenas >= 1, "{s:?}");
    drop(kept);
}

/// A held arena counts as a scope's with what it holds; once dropped, as idle, with
/// what escaped it.
#[test]
fn arenas_count_under_what_they_serve() {
    let arena = Arena::new().expect("an arena");
    let kept: Vec<Vec<u8>> = arena.enter(|| (0..32).map(|_| vec![1u8; MIB]).collect());
    let held = stats();
    assert!(held.scope.arenas >= 1);
    assert!(held.scope.active >= 32 * MIB, "{:?}", held.scope);
    assert!(held.scope.resident >= 32 * MIB, "{:?}", held.scope);
    drop(arena);
    let idle = stats();
    assert!(idle.idle.arenas >= 1);
    assert!(idle.idle.active >= 32 * MIB, "{:?}", idle.idle);
    drop(kept);
    arena_marked_for_a_pool();
}

fn arena_marked_for_a_pool() {
    let arena = Arena::new().expect("an arena");
    arena.mark_pool_worker();
    let kept = arena.enter(|| vec![1u8; 16 * MIB]);
    let s = stats();
    assert!(
        s.pool.arenas >= 1 && s.pool.active >= 16 * MIB,
        "{:?}",
        s.pool
    );
    drop(kept);
}

/// After a phase of N bytes is dropped, the total given back grows by at least
/// N - 16 MiB, and the phase counts as ended with what its end gave back.
#[test]
fn a_phase_s_bytes_count_as_given_back() {
    const N: usize = 256 * MIB;
    let label = Label::new("stats-test").expect("a label");
    let before = stats();
    label.phase(|| {
        let scratch: Vec<Vec<u8>> = (0..N / MIB).map(|_| vec![1u8; MIB]).collect();
        drop(scratch);
    });
    let after = stats();
    let grew = after.returned - before.returned;
    assert!(grew >= (N - 16 * MIB) as u64, "given back grew by {grew}");
    let phase = after.label_totals(label, Work::Phase);
    assert_eq!(phase.started, 1);
    assert_eq!(phase.ended, 1);
    assert!(phase.returned >= (N - 16 * MIB) as u64, "{phase:?}");
    assert!(after.phases.ended > before.phases.ended);
    assert!(after.phase.arenas >= 1);
}

/// Scopes count as started and ended, with what their ends gave back.
#[test]
fn scopes_count_what_their_ends_give_back() {
    let before = stats().scopes;
    let scratch = || drop((0..32).map(|_| vec![1u8; MIB]).collect::<Vec<_>>());
    arenapool_alloc::with_arena(scratch);
    let (_, report) = arenapool_alloc::with_arena_report(scratch);
    let after = stats().scopes;
    assert!(after.started >= before.started + 2 && after.ended >= before.ended + 2);
    assert!(
        after.returned - before.returned >= (64 - 8) as u64 * MIB as u64,
        "{report}: {before:?} -> {after:?}"
    );
    assert!(after.give_back_time > before.give_back_time);
}
