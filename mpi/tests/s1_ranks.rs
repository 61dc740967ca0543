//! What must be true, 4: scenario S1 on every rank, each in its own `ArenaPool`, gives
//! the memory back on every rank, and the gathered table is printed.
//!
//! Each rank runs 1,000 S1 tasks (400 KB results, scratch churn, workers warmed by
//! freeing 1 MiB each) in its pool, keeps 10% of the labels and drops the results. Its
//! RSS is then at most its start + 16 MiB + what it kept; rank 0 prints the table of
//! every rank's report and checks the gathered rows against the same bound.

mod common;

use arenapool_mpi::{Node, PhaseTable};
use arenapool_pool::ArenaPool;
use common::{all_ranks, check_s1, s1_task, say, threads_per_rank, MIB, S1_LEN};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TEST: &str = "s1_ranks";
const TASKS: usize = 1_000;
const SLACK: usize = 16 * MIB;

fn main() {
    let universe = mpi::initialize().expect("MPI initialised twice");
    let world = universe.world();
    let node = Node::split(&world).expect("split the world into nodes");
    let pool = ArenaPool::builder()
        .num_threads(threads_per_rank(node.size()))
        .build()
        .expect("pool");
    drop(std::hint::black_box(vec![1u8; MIB]));
    pool.run(|| {
        rayon::broadcast(|_| drop(std::hint::black_box(vec![1u8; MIB])));
    });

    let first = node.rank() * TASKS;
    let start = arenapool_alloc::rss();
    let (results, report) = pool.run_with_report(|| {
        (first..first + TASKS)
            .into_par_iter()
            .map(s1_task)
            .collect::<Vec<_>>()
    });
    let after_run = arenapool_alloc::rss();
    for (k, r) in results.iter().enumerate() {
        check_s1(first + k, r);
    }
    let kept: Vec<String> = results
        .into_iter()
        .step_by(10)
        .map(|(_, label)| label)
        .collect();
    let kept_bytes: usize = kept.iter().map(|s| s.capacity() + 4096).sum();
    let after_drop = arenapool_alloc::rss();
    let bound = start + SLACK + kept_bytes;
    say(
        TEST,
        &world,
        &format!(
            "RSS before {:.1} MiB, after the phase {:.1} MiB, after dropping {:.1} MiB \
             (bound {:.1} MiB); {report}",
            start as f64 / MIB as f64,
            after_run as f64 / MIB as f64,
            after_drop as f64 / MIB as f64,
            bound as f64 / MIB as f64,
        ),
    );
    let resident = after_run > start + TASKS * S1_LEN * 8 * 9 / 10;
    let returned = after_drop <= bound;

    let table = PhaseTable::gather(&world, &report).expect("gather the reports");
    if let Some(table) = &table {
        println!("{TEST}: the phase on every rank:\n{table}");
        for row in table.rows() {
            assert!(
                row.rss_now <= row.rss_before + SLACK + kept_bytes,
                "rank {}'s gathered RSS is above its bound",
                row.rank
            );
            assert!(
                row.rss_after > row.rss_before + TASKS * S1_LEN * 8 * 9 / 10,
                "rank {}'s gathered report does not show its results",
                row.rank
            );
        }
        assert_eq!(
            table.rows().len() as i32,
            mpi::traits::Communicator::size(&world)
        );
    }
    let all_ok = all_ranks(&world, resident && returned);
    assert_eq!(kept.len(), TASKS / 10);
    assert!(
        resident,
        "the results were not resident: the test measures nothing"
    );
    assert!(
        returned,
        "RSS after dropping the results is above the bound"
    );
    assert!(all_ok, "a check failed on another rank");
    say(TEST, &world, "ok");
}
