//! Phases nested and overlapping on 4 threads: a phase stays open until the last one
//! ends, whatever the order they end in; results made in them are intact; and once all
//! have ended and the results are dropped, RSS is back within 16 MiB of where it
//! started. Before that, the 4 threads open and close phases as fast as they can, each
//! allocating above the threshold in them, to race the end of one phase with the start
//! of another. Alone in its binary: it measures process RSS.
mod common;

use std::sync::Barrier;

use arenapool::{enter_phase, phase_is_open, PhaseGuard, RawAlloc};
use common::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const THREADS: usize = 4;
/// Results each thread makes: 250 × 400 KB, 400 MB from the 4.
const RESULTS: usize = 250;
/// Phases each thread opens and closes in the race.
const RACE_PHASES: usize = 2_000;

/// Thread `t`'s results: tasks `t * RESULTS..`, half of them in a phase nested in the
/// caller's.
fn results_of(t: usize) -> Vec<(Vec<f64>, String)> {
    let first = t * RESULTS;
    let mut results: Vec<_> = arenapool::phase(|| {
        assert!(phase_is_open());
        (first..first + RESULTS / 2).map(s1_task).collect()
    });
    results.extend((first + RESULTS / 2..first + RESULTS).map(s1_task));
    results
}

#[test]
fn nested_and_concurrent_phases_end_with_the_last() {
    warm_up_thread();

    // The race: every block of 64 KiB made in a phase is in a phase arena, and every
    // block keeps its contents, whichever phase of which thread ends meanwhile.
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..RACE_PHASES {
                    let fill = (t * RACE_PHASES + i) as u8;
                    let block = arenapool::phase(|| {
                        let block = std::hint::black_box(vec![fill; 64 << 10]);
                        assert!(RawAlloc::owns(block.as_ptr()), "phase {i} of thread {t}");
                        block
                    });
                    assert!(block.chunks(4096).all(|c| c[0] == fill && c[4095] == fill));
                }
            });
        }
    });
    assert!(!phase_is_open());
    let start = rss();

    // Each thread holds an outer phase, opens a nested one (which ends with the outer
    // still open), and the outer phases end one by one, thread 0 first: the phase is
    // open until the last has ended.
    let barrier = Barrier::new(THREADS);
    let results: Vec<Vec<(Vec<f64>, String)>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    warm_up_thread();
                    let mut outer: Option<PhaseGuard> = Some(enter_phase());
                    assert!(outer.as_ref().is_some_and(PhaseGuard::is_open));
                    barrier.wait(); // all four phases are open
                    let results = results_of(t);
                    assert!(
                        phase_is_open(),
                        "thread {t}: the nested phase ended them all"
                    );
                    barrier.wait(); // all results are made
                    for ending in 0..THREADS {
                        if ending == t {
                            drop(outer.take());
                        }
                        barrier.wait(); // thread `ending` has ended its phase
                        assert_eq!(
                            phase_is_open(),
                            ending + 1 < THREADS,
                            "thread {t}, after the phase of thread {ending} ended"
                        );
                        barrier.wait(); // all have checked
                    }
                    results
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(!phase_is_open());
    let during = rss();
    assert_touched("nested and concurrent phases", start, during, 300 * MIB);

    for (t, results) in results.iter().enumerate() {
        assert_eq!(results.len(), RESULTS);
        for (k, (result, label)) in results.iter().enumerate() {
            check_s1(t * RESULTS + k, result, label);
        }
    }
    drop(results);
    let now = rss();
    assert_back("nested and concurrent phases", start, during, now, 16 * MIB);
}
