//! Failing calls (feature `fault-injection`): a control call or a `madvise` that fails
//! once is made again and succeeds, so nothing fails; one that always fails is counted
//! in the report, and nothing panics. One test in the binary: the faults are
//! process-wide.

use arenapool_alloc::faults::{self, Fault};
use arenapool_alloc::{with_arena_report, Arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// 64 MiB of scratch, freed inside a scope; its report.
fn scope() -> arenapool_alloc::Report {
    let ((), report) = with_arena_report(|| {
        let scratch: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 1 << 20]).collect();
        assert!(scratch.iter().enumerate().all(|(i, b)| b[4095] == i as u8));
    });
    report
}

#[test]
fn failures_are_retried_then_counted() {
    // Warm: the scope's arena exists.
    drop(scope());

    // Every other call fails: each is made again, and succeeds.
    faults::fail_every(Fault::Control, 2);
    let arena = Arena::new().expect("an arena, each refused call made again");
    arena.purge().expect("a purge, made again");
    drop(arena);
    faults::fail_every(Fault::GiveBack, 2);
    let report = scope();
    faults::fail_every(Fault::Control, 0);
    faults::fail_every(Fault::GiveBack, 0);
    assert!(faults::injected(Fault::Control) > 0 && faults::injected(Fault::GiveBack) > 0);
    assert_eq!(report.failed, 0, "{report}");
    assert!(report.returned >= 60 << 20, "{report}");

    // The kernel refuses every time: counted, and the program goes on.
    faults::fail_every(Fault::GiveBack, 1);
    let report = scope();
    faults::fail_every(Fault::GiveBack, 0);
    assert!(report.failed > 0, "{report}");
    assert!(
        report.to_string().contains("attempts to give back failed"),
        "{report}"
    );

    // So does jemalloc's control interface: the scope runs, its end is counted.
    faults::fail_every(Fault::Control, 1);
    let report = scope();
    faults::fail_every(Fault::Control, 0);
    assert!(report.failed > 0 || report.arenas.is_empty(), "{report}");

    // Nothing is left broken: the next scope gives back as before.
    let report = scope();
    assert_eq!(report.failed, 0, "{report}");
    assert!(report.returned >= 60 << 20, "{report}");
}
