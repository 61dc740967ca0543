//! A `with_arena` scope and an `ArenaPool` job inside a phase keep their own arenas:
//! their threads allocate from them (large blocks included), never from the phase
//! arenas, and each gives back what it freed when it ends, while the phase is still
//! open. One test in the binary: phases are process-wide.
use std::collections::BTreeSet;

use arenapool::{
    current_arena, phase_is_open, phase_report, with_arena_report, ArenaPool, RawAlloc, Report,
};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const MIB: usize = 1 << 20;
/// Large blocks each piece of work holds at once, then frees: 64 MiB.
const BLOCKS: usize = 64;

/// 64 touched blocks of 1 MiB, all alive at once, then freed; returns how many of them
/// lay in memory of this crate's arenas.
fn hold_and_free_blocks() -> usize {
    let blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8 + 1; MIB]).collect();
    blocks
        .iter()
        .enumerate()
        .filter(|(i, b)| {
            assert_eq!((b[0], b[MIB - 1]), (*i as u8 + 1, *i as u8 + 1));
            RawAlloc::owns(b.as_ptr())
        })
        .count()
}

/// The freed blocks were in the work's arenas: they gave them back at the end of the
/// work. (Had they gone to the phase arenas, which keep freed pages while a phase is
/// open, these arenas would have given back almost nothing.)
fn assert_gave_back_the_blocks(what: &str, report: &Report) {
    eprintln!("{what}: {report}");
    assert!(
        report.returned >= (BLOCKS - 4) * MIB,
        "{what}: its arenas gave back {} B only, so its blocks were not in them: {report}",
        report.returned
    );
}

#[test]
fn scopes_and_pool_jobs_in_a_phase_keep_their_own_arenas() {
    let pool = ArenaPool::builder().num_threads(2).build().unwrap();
    let pool_arenas = pool.arena_indices();
    assert_eq!(pool_arenas.len(), 2);

    let (inner, phase) = phase_report(|| {
        assert!(phase_is_open());
        // The calling thread, unbound: its large blocks go to a phase arena, ours.
        let plain = vec![1u8; MIB];
        assert!(RawAlloc::owns(plain.as_ptr()));
        assert_eq!(current_arena(), None);

        // A scope: its thread is bound to the scope's arena, which holds its blocks.
        let ((scope_arena, owned), scope) = with_arena_report(|| {
            let arena = current_arena().expect("a scope binds its thread");
            (arena, hold_and_free_blocks())
        });
        assert_eq!(owned, BLOCKS);
        assert_eq!(scope.arenas, vec![scope_arena]);
        assert_gave_back_the_blocks("scope in a phase", &scope);
        assert_eq!(current_arena(), None);
        assert!(phase_is_open());

        // A pool job: every task runs on a worker bound to one of the pool's arenas.
        let ((seen, owned), job) = pool.run_with_report(|| {
            let seen: BTreeSet<Option<u32>> = (0..256)
                .into_par_iter()
                .map(|i| {
                    let block = std::hint::black_box(vec![i as u8; 64 << 10]);
                    assert!(RawAlloc::owns(block.as_ptr()));
                    current_arena()
                })
                .collect();
            (seen, hold_and_free_blocks())
        });
        assert_eq!(owned, BLOCKS);
        assert!(
            seen.iter()
                .all(|a| a.is_some_and(|a| pool_arenas.contains(&a))),
            "tasks ran in arenas {seen:?}, not the pool's {pool_arenas:?}"
        );
        assert_eq!(job.arenas, pool_arenas);
        assert_gave_back_the_blocks("pool job in a phase", &job);

        // A phase opened inside a scope leaves the scope's thread bound to its arena.
        let (nested_arena, nested) = with_arena_report(|| {
            arenapool::phase(|| {
                assert_eq!(hold_and_free_blocks(), BLOCKS);
                current_arena().expect("still bound inside the nested phase")
            })
        });
        assert_eq!(nested.arenas, vec![nested_arena]);
        assert_gave_back_the_blocks("phase inside a scope in a phase", &nested);
        assert!(phase_is_open());

        let plain_again = vec![2u8; MIB];
        assert!(RawAlloc::owns(plain_again.as_ptr()));
        (
            vec![scope_arena, nested_arena],
            plain.len() + plain_again.len(),
        )
    });
    assert!(!phase_is_open());
    eprintln!("phase: {phase}");

    let (scope_arenas, len) = inner;
    assert_eq!(len, 2 * MIB);
    assert!(!phase.arenas.is_empty(), "{phase}");
    for arena in scope_arenas.iter().chain(&pool_arenas) {
        assert!(
            !phase.arenas.contains(arena),
            "arena {arena} of a scope or the pool is a phase arena: {:?}",
            phase.arenas
        );
    }

    // After the phase, an unbound thread's large blocks are jemalloc's again.
    let outside = vec![3u8; MIB];
    assert!(!RawAlloc::owns(outside.as_ptr()));
}
