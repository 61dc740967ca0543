//! Scopes that end while another thread runs `trim()` over and over still give back
//! the pages their work freed: a purge asked for while another purge of the same arena
//! is under way must wait for it and then do its own, not return having done nothing.
//! Checked with jemalloc's purge counters (the scope's report), not RSS.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use arenapool_alloc::{trim, with_arena_report, ArenaAlloc, Bytes};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const SCOPES: usize = 400;

#[test]
fn scope_ends_give_back_their_pages_while_trim_runs() {
    let stop = AtomicBool::new(false);
    let started = Barrier::new(2);
    let short: Vec<String> = std::thread::scope(|s| {
        let trimmer = s.spawn(|| {
            started.wait();
            let mut trims = 0u64;
            while !stop.load(Ordering::Relaxed) {
                trim().expect("trim");
                trims += 1;
            }
            trims
        });
        started.wait();
        let mut short = Vec::new();
        for n in 0..SCOPES {
            // 1 to 4 MiB of scratch, plus small objects spread over many pages, all
            // freed inside the scope: a trim running meanwhile has pages of this arena
            // to work on when the scope ends.
            let words = (1 << 17) + (n % 4) * (1 << 17) * 3 / 4;
            let (len, report) = with_arena_report(|| {
                let small: Vec<Box<[u64; 64]>> = (0..2_000).map(|i| Box::new([i; 64])).collect();
                let scratch: Vec<u64> = (0..words as u64).collect();
                scratch.len() + small.len()
            });
            assert_eq!(len, words + 2_000);
            let scratch = words * 8;
            if report.returned < scratch * 3 / 4 {
                short.push(format!(
                    "scope {n}: gave back {} of {} freed: {report}",
                    Bytes(report.returned),
                    Bytes(scratch)
                ));
            }
        }
        stop.store(true, Ordering::Relaxed);
        let trims = trimmer.join().unwrap();
        eprintln!("{SCOPES} scopes ended during {trims} trims");
        short
    });
    assert!(
        short.is_empty(),
        "{} of {SCOPES} scopes kept pages they freed:\n{}",
        short.len(),
        short.join("\n")
    );
}
