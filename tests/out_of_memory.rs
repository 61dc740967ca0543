//! Out of memory under an address-space limit (`RLIMIT_AS`): inside a phase, a scope
//! and a pool job, and outside them, blocks of 64 MiB are reserved with `try_reserve`
//! until the kernel refuses; the refusal comes back as an `Err`, every block reserved
//! before it holds its contents, goes back to the OS when dropped (outside phases,
//! scopes and jobs, once the process is idle: the arenas there keep freed blocks for
//! reuse until then), and the next phase, scope or job works. Each kind runs in a child
//! process of its own (this binary, run again), since the limit is the whole process's
//! and jemalloc keeps the address space an arena has mapped for that arena: under the
//! limit, the next phase reuses the phase's, the next scope the scope's.

use std::collections::TryReserveError;

use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const MIB: usize = 1 << 20;
const BLOCK: usize = 64 * MIB;

/// Room the process may map beyond what it has mapped when the limit is set.
const ROOM: u64 = 1 << 30;

/// Reserves and fills 64 MiB blocks until one is refused; returns them and the refusal.
fn fill_until_refused(seed: u8) -> (Vec<Vec<u8>>, TryReserveError) {
    // Room for every block reserved first: no reallocation of the list near the limit.
    let mut blocks: Vec<Vec<u8>> = Vec::with_capacity(256);
    loop {
        let mut block = Vec::new();
        match block.try_reserve_exact(BLOCK) {
            Ok(()) => {
                block.resize(BLOCK, seed.wrapping_add(blocks.len() as u8));
                blocks.push(block);
                assert!(blocks.len() < 256, "the address-space limit never refused");
            }
            Err(e) => return (blocks, e),
        }
    }
}

fn check(blocks: &[Vec<u8>], seed: u8) {
    for (i, block) in blocks.iter().enumerate() {
        let want = seed.wrapping_add(i as u8);
        assert!(
            block.len() == BLOCK
                && block[0] == want
                && block[BLOCK / 2] == want
                && block[BLOCK - 1] == want,
            "block {i} lost its contents"
        );
    }
}

/// When the blocks of a round go back to the OS once dropped.
#[derive(Clone, Copy, PartialEq)]
enum GivenBack {
    /// At the end of the phase, scope or job: at once.
    AtTheEnd,
    /// Outside them, what the arenas keep for reuse (up to their bound) goes back when
    /// the process goes idle, a second after its last large allocation.
    WhenIdle,
}

/// One round in `run` (a phase, a scope or a pool job, or outside them): filled until
/// refused, checked, dropped; RSS must come back within 16 MiB of `start`, at once or,
/// outside, once the process is idle (within 30 s). Returns how many blocks fit.
fn round(
    what: &str,
    start: usize,
    given_back: GivenBack,
    run: impl FnOnce(&(dyn Fn() -> Vec<Vec<u8>> + Sync)) -> Vec<Vec<u8>>,
) -> usize {
    let seed = what.len() as u8;
    let blocks = run(&|| {
        let (blocks, refused) = fill_until_refused(seed);
        eprintln!("{what}: {} blocks of 64 MiB, then {refused}", blocks.len());
        blocks
    });
    assert!(
        blocks.len() >= 8,
        "{what}: only {} blocks before the refusal",
        blocks.len()
    );
    check(&blocks, seed);
    let n = blocks.len();
    drop(blocks);
    let mut after = arenapool::rss();
    if given_back == GivenBack::WhenIdle {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while after >= start + 16 * MIB && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            after = arenapool::rss();
        }
    }
    eprintln!(
        "{what}: RSS after the drop {:.1} MiB above the start",
        after.saturating_sub(start) as f64 / MIB as f64
    );
    assert!(
        after < start + 16 * MIB,
        "{what}: RSS {} MiB after the drop, start {} MiB",
        after / MIB,
        start / MIB
    );
    n
}

/// Reserves one 64 MiB block, fills and checks it.
fn one_block() -> bool {
    let mut block = Vec::<u8>::new();
    if block.try_reserve_exact(BLOCK).is_err() {
        return false;
    }
    block.resize(BLOCK, 9);
    block[BLOCK - 1] == 9
}

/// The child's part: `kind` under the limit.
fn limited(kind: &str) {
    let pool = arenapool::ArenaPool::builder()
        .num_threads(2)
        .build()
        .expect("a pool");
    // The arenas of the kind exist before the limit.
    arenapool::phase(|| drop(vec![0u8; 1 << 20]));
    arenapool::with_arena(|| drop(vec![0u8; 1 << 20]));
    pool.run(|| {
        (0..2)
            .into_par_iter()
            .for_each(|_| drop(vec![0u8; 1 << 20]))
    });
    let _ = arenapool::trim();

    let mapped = std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmSize")
        * 1024;
    let limit = libc::rlimit {
        rlim_cur: mapped + ROOM,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `limit` is a valid `rlimit`; lowering the soft limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
    // No backtrace on a failure: symbolising one allocates, which the limit may refuse.
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let start = arenapool::rss();
    for round_number in 0..2 {
        let what = format!("{kind}, round {round_number}");
        match kind {
            "phase" => {
                round(&what, start, GivenBack::AtTheEnd, |fill| {
                    arenapool::phase(fill)
                });
                assert!(
                    arenapool::phase(one_block),
                    "the next phase could not allocate"
                );
                assert!(!arenapool::phase_is_open());
            }
            "scope" => {
                round(&what, start, GivenBack::AtTheEnd, |fill| {
                    arenapool::with_arena(fill)
                });
                assert!(
                    arenapool::with_arena(one_block),
                    "the next scope could not allocate"
                );
            }
            "job" => {
                round(&what, start, GivenBack::AtTheEnd, |fill| {
                    pool.run(|| rayon::join(fill, || ()).0)
                });
                assert!(
                    pool.run(|| (0..2).into_par_iter().all(|_| one_block())),
                    "the next pool job could not allocate"
                );
            }
            "outside" => {
                round(&what, start, GivenBack::WhenIdle, |fill| fill());
                assert!(one_block(), "outside, a block could not be allocated");
            }
            other => panic!("no kind {other}"),
        }
    }
}

/// Which kind this process runs under the limit, when it is the child.
const KIND: &str = "ARENAPOOL_TEST_OOM_KIND";

#[test]
fn a_refusal_is_an_error_and_the_next_work_runs() {
    if let Ok(kind) = std::env::var(KIND) {
        return limited(&kind);
    }
    for kind in ["phase", "scope", "job", "outside"] {
        let mut child = std::process::Command::new(std::env::current_exe().expect("this test"))
            .args([
                "--exact",
                "a_refusal_is_an_error_and_the_next_work_runs",
                "--nocapture",
            ])
            .env(KIND, kind)
            .spawn()
            .expect("the test, run again");
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("the child") {
                break status;
            }
            if started.elapsed() > std::time::Duration::from_secs(120) {
                let _ = child.kill();
                panic!("{kind}: the child hung");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(status.success(), "{kind}: the child failed ({status})");
    }
}
