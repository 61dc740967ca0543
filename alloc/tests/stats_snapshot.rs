//! `stats()` is one snapshot: the kinds' resident bytes add up to jemalloc's, also
//! while another thread allocates, gives pages back and refreshes jemalloc's
//! statistics itself (as the allocator does at a phase's end).

use std::sync::atomic::{AtomicBool, Ordering};

use arenapool_alloc::{stats, trim, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn the_kinds_add_up_to_jemalloc_s_resident_while_another_thread_refreshes() {
    let stop = AtomicBool::new(false);
    let mismatches = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut kept = Vec::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                kept.push(vec![1u8; 4096 * (1 + i % 64)]);
                if kept.len() > 8 {
                    kept.clear();
                    let _ = trim();
                }
                let _ = stats();
                i += 1;
            }
        });
        let mismatches: Vec<(usize, usize)> = (0..20_000)
            .map(|_| {
                let snapshot = stats();
                let by_kind = snapshot
                    .by_kind()
                    .iter()
                    .map(|(_, held)| held.resident)
                    .sum();
                (by_kind, snapshot.resident)
            })
            .filter(|(by_kind, resident)| by_kind != resident)
            .collect();
        stop.store(true, Ordering::Relaxed);
        mismatches
    });
    assert!(
        mismatches.is_empty(),
        "{} of 20,000 snapshots did not add up: {:?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(3)]
    );
}
