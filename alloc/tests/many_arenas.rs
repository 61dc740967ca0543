//! On a machine with many CPUs jemalloc makes hundreds of automatic arenas, and this
//! crate's arenas get high indices. Re-runs itself with `narenas:200` (as on a 50-CPU
//! machine) and checks that scopes still give their memory back, at once, both what is
//! freed inside and results dropped after. Alone in its binary: it measures RSS.
mod common;

use std::process::Command;

use arenapool_alloc::{current_arena, with_arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const CHILD: &str = "ARENAPOOL_MANY_ARENAS_CHILD";

#[test]
fn arenas_with_high_indices_give_memory_back() {
    if std::env::var_os(CHILD).is_none() {
        let status = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "arenas_with_high_indices_give_memory_back",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .env("_RJEM_MALLOC_CONF", "narenas:200")
            .status()
            .unwrap();
        assert!(status.success(), "the run with narenas:200 failed");
        return;
    }
    warm_up_thread();
    let before = rss();
    let (results, index) = with_arena(|| {
        let results: Vec<Vec<f64>> = (0..500).map(|i| s1_task(i).0).collect();
        (results, current_arena())
    });
    let held = rss();
    drop(results);
    let after = rss();
    eprintln!(
        "many_arenas: arena {index:?}; before {:.1} MiB; holding +{:.1}; after +{:.1}",
        before as f64 / MIB as f64,
        mib_diff(held, before),
        mib_diff(after, before)
    );
    assert!(index.unwrap() >= 200, "jemalloc did not take narenas:200");
    assert!(held > before + 150 * MIB, "the results were not resident");
    assert!(
        after <= before + 16 * MIB,
        "a high-index arena kept its pages"
    );
}
