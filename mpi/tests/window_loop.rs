//! What must be true, 1 and 2: a loop of 20,000 shared windows runs in flat memory, and
//! every rank reads exactly what each owner wrote, in every iteration.
//!
//! Each iteration: rank 0 of the node allocates 100,000 f64 (800 KB, the field
//! report's size) and the other ranks 1,000, collectively; every rank writes its own
//! segment with values that name the iteration, the rank and the index; every rank
//! checks every element of every segment; the window is dropped. After a warm-up of
//! 1,000 iterations, every rank's RSS, its RSS in shared memory and the machine's
//! shared memory grow by at most 1 MiB over the remaining 19,000.
//!
//! Then 500 iterations that each also split a new node (`Node::split`, freed when
//! dropped) stay within the same 1 MiB.
//!
//! Then a control runs 200 more iterations that never free their windows (it keeps
//! them, as the field report's program did in effect): the same figures grow by far
//! more than 1 MiB, so the check above can fail. Dropping the kept windows at the end
//! gives it all back. (`mem::forget` would leak them for good, and `MPI_Finalize` then
//! stops the process, since it would unmap their memory.)
//!
//! `ARENAPOOL_MPI_ITERATIONS` sets another iteration count (more than the warm-up);
//! `.ci/mpi` uses it for its oversubscribed run, where every collective call costs
//! context switches.
//!
//! ```sh
//! cargo test --no-run && mpirun -np 2 target/debug/deps/window_loop-*
//! ```

mod common;

use std::time::Instant;

use arenapool_mpi::{Node, SharedWindow};
use common::{all_ranks, mib, say, Figures, MIB};
use mpi::traits::CommunicatorCollectives;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TEST: &str = "window_loop";
const DEFAULT_ITERATIONS: usize = 20_000;
const WARM_UP: usize = 1_000;
const CONTROL: usize = 200;
/// Iterations that split a new node each (a communicator never freed costs about 7 KB
/// of heap per iteration: 3.5 MB over these).
const SPLITS: usize = 500;
const ROOT_LEN: usize = 100_000;
const OTHER_LEN: usize = 1_000;
const BOUND: i64 = MIB as i64;

/// What rank `rank` writes at `index` of its segment in iteration `iteration`: exact
/// in an f64, and different for every (iteration, rank, index) the test uses.
fn value(iteration: usize, rank: usize, index: usize) -> f64 {
    (((iteration * 64 + rank) * ROOT_LEN) + index) as f64
}

/// One iteration; the window is returned instead of dropped if `keep`.
fn iteration(node: &Node, i: usize, keep: bool) -> Option<SharedWindow<'_, f64>> {
    let rank = node.rank();
    let len = if rank == 0 { ROOT_LEN } else { OTHER_LEN };
    let mut w = node.allocate::<f64>(len).expect("allocate");
    w.write(|mine| {
        for (k, x) in mine.iter_mut().enumerate() {
            *x = value(i, rank, k);
        }
    });
    for owner in 0..w.ranks() {
        let segment = w.segment(owner);
        let expected_len = if owner == 0 { ROOT_LEN } else { OTHER_LEN };
        assert_eq!(
            segment.len(),
            expected_len,
            "iteration {i}: rank {owner}'s length"
        );
        for (k, &x) in segment.iter().enumerate() {
            if x != value(i, owner, k) {
                panic!(
                    "iteration {i}: rank {rank} read {x} at index {k} of rank {owner}'s \
                     segment, where {owner} wrote {}",
                    value(i, owner, k)
                );
            }
        }
    }
    keep.then_some(w)
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialised twice");
    let world = universe.world();
    let node = Node::split(&world).expect("split the world into nodes");
    let iterations = match std::env::var("ARENAPOOL_MPI_ITERATIONS") {
        Ok(n) => n
            .parse()
            .expect("ARENAPOOL_MPI_ITERATIONS: a number of iterations"),
        Err(_) => DEFAULT_ITERATIONS,
    };
    assert!(
        iterations > WARM_UP,
        "ARENAPOOL_MPI_ITERATIONS must be more than the {WARM_UP} of warm-up"
    );

    for i in 0..WARM_UP {
        assert!(iteration(&node, i, false).is_none());
    }
    node.barrier();
    let start = Figures::now();
    let clock = Instant::now();
    for i in WARM_UP..iterations {
        assert!(iteration(&node, i, false).is_none());
    }
    node.barrier();
    let elapsed = clock.elapsed();
    let end = Figures::now();
    let growth = start.growth(&end);
    let per_second = (iterations - WARM_UP) as f64 / elapsed.as_secs_f64();
    say(
        TEST,
        &world,
        &format!(
            "{} iterations after {WARM_UP} of warm-up in {elapsed:.2?} ({per_second:.0}/s); \
             growth: RSS {}, RssShmem {}, node Shmem {}",
            iterations - WARM_UP,
            mib(growth[0]),
            mib(growth[1]),
            mib(growth[2]),
        ),
    );
    let flat = growth.iter().all(|&g| g <= BOUND);

    // The control: the same loop, never freeing a window.
    node.barrier();
    let before_leaks = Figures::now();
    let kept: Vec<_> = (0..CONTROL)
        .filter_map(|i| iteration(&node, iterations + i, true))
        .collect();
    node.barrier();
    let leaked = before_leaks.growth(&Figures::now());
    drop(kept);
    node.barrier();
    let after_drop = before_leaks.growth(&Figures::now());
    say(
        TEST,
        &world,
        &format!(
            "control, {CONTROL} windows never freed: growth RSS {}, RssShmem {}, node Shmem \
             {}; after dropping them: RSS {}, RssShmem {}, node Shmem {}",
            mib(leaked[0]),
            mib(leaked[1]),
            mib(leaked[2]),
            mib(after_drop[0]),
            mib(after_drop[1]),
            mib(after_drop[2]),
        ),
    );
    // Every rank maps and reads rank 0's 800 KB segment: the leak shows on every rank.
    let leak_seen =
        leaked.iter().all(|&g| g > BOUND) && leaked[1] >= (CONTROL * ROOT_LEN * 8 / 2) as i64;

    // The report's program also split a new node communicator every iteration: with
    // `Node`, each one is freed when it is dropped.
    let splits = SPLITS.min(iterations);
    world.barrier();
    let before_splits = Figures::now();
    for i in 0..splits {
        let fresh = Node::split(&world).expect("split the world into nodes");
        assert!(iteration(&fresh, i, false).is_none());
    }
    world.barrier();
    let split_growth = before_splits.growth(&Figures::now());
    say(
        TEST,
        &world,
        &format!(
            "{splits} iterations that each split a new node: growth RSS {}, RssShmem {}, \
             node Shmem {}",
            mib(split_growth[0]),
            mib(split_growth[1]),
            mib(split_growth[2]),
        ),
    );
    let splits_flat = split_growth.iter().all(|&g| g <= BOUND);

    let all_flat = all_ranks(&world, flat && splits_flat);
    let all_leak_seen = all_ranks(&world, leak_seen);
    assert!(
        splits_flat,
        "memory grew by more than 1 MiB over the loop that splits nodes"
    );
    assert!(flat, "memory grew by more than 1 MiB over the loop");
    assert!(all_flat, "memory grew on another rank");
    assert!(
        leak_seen,
        "leaking windows did not grow memory: the check above cannot fail"
    );
    assert!(all_leak_seen, "the control failed on another rank");
    say(TEST, &world, "ok");
}
