//! What must be true, 3: a 256 MiB read-only state shared by every rank of a node
//! costs the node about 256 MiB, not 256 MiB per rank.
//!
//! Rank 0 of the node builds 32 Mi f64 with `Node::share`; every rank's `ArenaPool`
//! sums all of it in place. Then, on every rank: the machine's shared memory grew by
//! at least 90% of the state and at most the state plus 64 MiB (four copies would be
//! 1 GiB); the rank's RSS in shared memory grew by at least 90% of the state (it reads
//! every page in place); its private memory grew by at most 32 MiB (it made no copy).
//! After the state is dropped, the machine's shared memory is back within 16 MiB.

mod common;

use arenapool_mpi::{node_shmem, rss_anon, rss_shmem, Node};
use arenapool_pool::ArenaPool;
use common::{all_ranks, mib, say, threads_per_rank, MIB};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TEST: &str = "shared_state";
const LEN: usize = 32 << 20;
const STATE: i64 = (LEN * 8) as i64;
const PERIOD: usize = 1024;

fn main() {
    let universe = mpi::initialize().expect("MPI initialised twice");
    let world = universe.world();
    let node = Node::split(&world).expect("split the world into nodes");
    let pool = ArenaPool::builder()
        .num_threads(threads_per_rank(node.size()))
        .build()
        .expect("pool");

    node.barrier();
    let (node0, shmem0, anon0) = (node_shmem(), rss_shmem(), rss_anon());
    let state = node
        .share::<f64>(0, LEN, |t| {
            for (i, x) in t.iter_mut().enumerate() {
                *x = (i % PERIOD) as f64;
            }
        })
        .expect("share the state");
    let sum: f64 = pool.run(|| {
        state
            .par_chunks(1 << 16)
            .map(|c| c.iter().sum::<f64>())
            .sum()
    });
    let expected = (LEN / PERIOD) as f64 * (PERIOD * (PERIOD - 1) / 2) as f64;
    assert_eq!(sum, expected, "the state read on rank {}", node.rank());
    node.barrier();
    let node_growth = node_shmem() as i64 - node0 as i64;
    let shmem_growth = rss_shmem() as i64 - shmem0 as i64;
    let anon_growth = rss_anon() as i64 - anon0 as i64;
    say(
        TEST,
        &world,
        &format!(
            "{} rank(s) read a {} MiB state: node Shmem {}, this rank's RssShmem {}, RssAnon {}",
            node.size(),
            STATE >> 20,
            mib(node_growth),
            mib(shmem_growth),
            mib(anon_growth),
        ),
    );
    let once = node_growth >= STATE * 9 / 10 && node_growth <= STATE + 64 * MIB as i64;
    let in_place = shmem_growth >= STATE * 9 / 10 && anon_growth <= 32 * MIB as i64;

    drop(state);
    node.barrier();
    let left = node_shmem() as i64 - node0 as i64;
    say(
        TEST,
        &world,
        &format!("after drop: node Shmem {}", mib(left)),
    );
    let freed = left <= 16 * MIB as i64;

    let ok = once && in_place && freed;
    let all_ok = all_ranks(&world, ok);
    assert!(once, "the node does not hold the state exactly once");
    assert!(in_place, "this rank did not read the state in place");
    assert!(
        freed,
        "dropping the state did not give the shared memory back"
    );
    assert!(all_ok, "a check failed on another rank");
    say(TEST, &world, "ok");
}
