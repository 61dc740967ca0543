//! A panic inside a phase: the phase ends, the panic reaches the caller with its
//! payload, and the memory allocated before the panic goes back to the OS, both what
//! the unwinding freed and what escaped in the payload (once it is dropped). Then the
//! same with the panic raised by a task on a rayon pool's worker. Alone in its binary:
//! it measures process RSS.
mod common;

use std::panic::{self, AssertUnwindSafe};

use common::*;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

/// Results per worker: 500 × 400 KB (200 MB).
const RESULTS: usize = 500;
/// Bytes of one worker's results.
const RESULTS_BYTES: usize = RESULTS * S1_LEN * 8;

/// What the panic carries out of the phase.
struct Escaped(Vec<Vec<f64>>);

#[test]
fn a_panic_ends_the_phase_and_its_memory_goes_back() {
    panic::set_hook(Box::new(|info| eprintln!("expected: {info}")));
    let pool = warmed_pool(2);
    warm_up_thread();
    let start = rss();

    // 1. A panic on the phase's own thread.
    let mut during = 0;
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        arenapool::phase(|| {
            // Two scoped threads make 200 MB each: one set is freed by the unwinding,
            // the other escapes in the panic's payload.
            let (freed, escaped) = std::thread::scope(|s| {
                let make = |first: usize| {
                    s.spawn(move || {
                        (first..first + RESULTS)
                            .map(|i| s1_task(i).0)
                            .collect::<Vec<_>>()
                    })
                };
                let (a, b) = (make(0), make(RESULTS));
                (a.join().unwrap(), b.join().unwrap())
            });
            during = rss();
            assert!(arenapool::phase_is_open());
            assert_eq!(freed.len(), RESULTS);
            panic::panic_any(Escaped(escaped));
        })
    }));
    assert!(!arenapool::phase_is_open(), "the panic left the phase open");
    assert_touched(
        "panic in a phase",
        start,
        during,
        2 * RESULTS_BYTES - 16 * MIB,
    );

    let payload = caught.expect_err("the panic did not reach the caller");
    let escaped = payload
        .downcast::<Escaped>()
        .expect("the payload is the one the phase panicked with");
    assert_eq!(escaped.0.len(), RESULTS);
    for (k, result) in escaped.0.iter().enumerate() {
        let i = RESULTS + k;
        check_s1(i, result, &format!("task-{i:06}-label"));
    }
    let unwound = rss();
    drop(escaped);
    let now = rss();

    eprintln!(
        "panic in a phase: after the unwinding (the payload alive) {:+.1} MiB",
        mib_diff(unwound, start)
    );
    // What the unwinding freed has gone back: only the payload is still resident.
    assert!(
        unwound <= start + RESULTS_BYTES + 16 * MIB,
        "after the unwinding RSS is {:+.1} MiB above the start, 16 MiB more than the \
         {} payload",
        mib_diff(unwound, start),
        arenapool::Bytes(RESULTS_BYTES)
    );
    assert_back("panic in a phase", start, during, now, 16 * MIB);

    // 2. A panic in a task on a rayon pool's worker, after the other tasks have made
    //    their results: rayon drops those while unwinding, inside the phase.
    let _ = arenapool::reset_peak_rss(); // the peak is only printed
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        arenapool::phase(|| {
            pool.install(|| {
                (0..2 * RESULTS)
                    .into_par_iter()
                    .map(|i| {
                        assert!(i + 1 < 2 * RESULTS, "the last task fails");
                        s1_task(i).0
                    })
                    .collect::<Vec<_>>()
            })
        })
    }));
    assert!(
        !arenapool::phase_is_open(),
        "the worker's panic left the phase open"
    );
    let message = caught.expect_err("the worker's panic did not reach the caller");
    assert!(
        message
            .downcast_ref::<&str>()
            .is_some_and(|m| m.contains("the last task fails")),
        "another panic reached the caller"
    );
    let _ = panic::take_hook();
    // How far the tasks got before the panic stopped them is up to rayon's scheduling:
    // the peak is printed, not asserted.
    let peak = arenapool::peak_rss();
    assert_back(
        "panic on a rayon worker (peak RSS)",
        start,
        peak,
        rss(),
        16 * MIB,
    );
}
