//! What must be true, 5: bad inputs give their error on every rank, and the program
//! goes on.
//!
//! In order, on every rank: MPI not initialised; a length whose byte size overflows
//! (on the node's last rank only: the others get `is_other_rank`); lengths that each
//! fit but whose node total does not; a length larger than `/dev/shm`; a zero-sized
//! and an over-aligned type; ranks that disagree on the element type (alone on a
//! node, a rank's window is made and dropped); a rank out of range; a panic inside one rank's `write`;
//! a communicator that is not node-local. After each, a good window is made, written
//! and checked.
//!
//! Under a two-node layout (`ARENAPOOL_MPI_EXPECT_NODES=2`, see `.ci/mpi`), the world
//! spans two nodes and `Node::from_comm(&world)` must refuse it; on one node it must
//! accept it.

mod common;

use std::error::Error as _;
use std::panic::{self, AssertUnwindSafe};

use arenapool_mpi::{Node, PhaseTable, Plain};
use arenapool_pool::ArenaPool;
use common::{say, sum_ranks};
use mpi::traits::Communicator;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const TEST: &str = "bad_inputs";

#[derive(Clone, Copy)]
struct Empty;
// SAFETY: no bytes at all: nothing to point anywhere, nothing invalid.
unsafe impl Plain for Empty {}

#[derive(Clone, Copy)]
#[repr(C, align(8192))]
struct PageAndMore([u8; 8192]);
// SAFETY: bytes only; zero is valid.
unsafe impl Plain for PageAndMore {}

/// The program goes on: a good window, written and read back on every rank.
fn good_window(node: &Node, round: u32) {
    let mut w = node
        .allocate::<u32>(64)
        .expect("a good window after a bad input");
    let rank = node.rank() as u32;
    w.write(|mine| mine.fill(round * 100 + rank));
    for owner in 0..w.ranks() {
        assert!(
            w.segment(owner)
                .iter()
                .all(|&x| x == round * 100 + owner as u32),
            "round {round}: rank {owner}'s segment"
        );
    }
}

fn main() {
    // MPI not initialised: the world handle exists, MPI does not yet.
    let early = mpi::topology::SimpleCommunicator::world();
    let e = Node::split(&early).expect_err("split before MPI_Init");
    assert!(e.is_not_initialized(), "{e}");
    println!("{TEST}: before MPI_Init: {e}");
    let pool = ArenaPool::builder().num_threads(1).build().expect("pool");
    let ((), report) = pool.run_with_report(|| ());
    let e = PhaseTable::gather(&early, &report).expect_err("gather before MPI_Init");
    assert!(e.is_not_initialized(), "{e}");

    let universe = mpi::initialize().expect("MPI initialised twice");
    let world = universe.world();
    let node = Node::split(&world).expect("split the world into nodes");
    let rank = node.rank();
    let last = node.size() - 1;
    let report_error = |what: &str, e: &arenapool_mpi::Error| {
        say(TEST, &world, &format!("{what}: {e}"));
    };
    good_window(&node, 0);

    // A byte size that overflows, on the last rank only.
    let len = if rank == last { usize::MAX } else { 10 };
    let e = node.allocate::<f64>(len).expect_err("overflowing length");
    report_error("usize::MAX f64 on the last rank", &e);
    if rank == last {
        assert!(e.is_too_large() && !e.is_other_rank(), "{e}");
    } else {
        assert!(e.is_other_rank(), "{e}");
        assert_eq!(e.faulty_rank(), Some(last));
        let cause = e.source().expect("the faulty rank's error");
        assert!(cause.to_string().contains("does not fit"), "{cause}");
    }
    good_window(&node, 1);

    // Each rank's size fits; the node's total does not (or, alone on a node, does not
    // fit in /dev/shm).
    let e = node
        .allocate::<u8>(isize::MAX as usize / 2 + 1)
        .expect_err("node total too large");
    report_error("isize::MAX / 2 bytes on every rank", &e);
    assert!(e.is_too_large() && !e.is_other_rank(), "{e}");
    good_window(&node, 2);

    // Fits the address space, not the machine's shared memory: refused before any page
    // is touched (touching it would kill the process).
    let e = node
        .allocate::<f64>(1 << 40)
        .expect_err("8 TiB of shared memory");
    report_error("8 TiB on every rank", &e);
    assert!(e.is_too_large(), "{e}");
    assert!(e.to_string().contains("/dev/shm"), "{e}");
    good_window(&node, 3);

    // Types a window cannot hold.
    let e = node.allocate::<Empty>(10).expect_err("zero-sized type");
    report_error("zero-sized type", &e);
    assert!(e.is_bad_type(), "{e}");
    let e = node
        .allocate::<PageAndMore>(1)
        .expect_err("8192-byte alignment");
    report_error("8192-byte alignment", &e);
    assert!(e.is_bad_type(), "{e}");
    // Ranks that disagree on the element type (u64 on the last rank, f64 elsewhere).
    let made = if rank == last {
        node.allocate::<u64>(8).map(drop)
    } else {
        node.allocate::<f64>(8).map(drop)
    };
    if node.size() > 1 {
        let e = made.expect_err("different element types");
        report_error("u64 on the last rank, f64 elsewhere", &e);
        assert!(e.is_bad_type(), "{e}");
    } else {
        made.expect("alone on its node, a rank agrees with itself");
    }
    good_window(&node, 4);

    // Ranks out of range: a segment (this rank only) and a root (every rank).
    let w = node.allocate::<u64>(4).expect("window");
    let e = w
        .try_segment(node.size())
        .expect_err("segment past the last rank");
    report_error("segment(size)", &e);
    assert!(e.is_rank_out_of_range(), "{e}");
    let caught = panic::catch_unwind(AssertUnwindSafe(|| w.segment(node.size()).len()));
    assert!(caught.is_err(), "segment(size) must panic");
    drop(w);
    let e = node
        .share::<u64>(node.size(), 4, |_| unreachable!("no rank is root"))
        .expect_err("root past the last rank");
    report_error("share(root = size)", &e);
    assert!(e.is_rank_out_of_range(), "{e}");
    good_window(&node, 5);

    // A panic in one rank's write: every rank panics, the window is still freed
    // collectively, and the program goes on.
    let mut w = node.allocate::<u64>(4).expect("window");
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        w.write(|mine| {
            if rank == last {
                panic!("a bad value on the last rank");
            }
            mine.fill(1);
        })
    }));
    assert!(caught.is_err(), "every rank must see the panic");
    drop(w);
    good_window(&node, 6);

    // A communicator that spans nodes.
    let nodes = sum_ranks(&world, u64::from(rank == 0));
    say(
        TEST,
        &world,
        &format!("{nodes} node(s), {} rank(s) on this one", node.size()),
    );
    if let Ok(expected) = std::env::var("ARENAPOOL_MPI_EXPECT_NODES") {
        assert_eq!(
            nodes.to_string(),
            expected,
            "the layout was not what was asked"
        );
    }
    match Node::from_comm(&world) {
        Ok(whole) => {
            assert_eq!(nodes, 1, "a communicator over {nodes} nodes was accepted");
            assert_eq!(whole.size() as i32, world.size());
        }
        Err(e) => {
            report_error("Node::from_comm(world)", &e);
            assert!(nodes > 1, "one node refused: {e}");
            assert!(e.is_not_node_local(), "{e}");
        }
    }
    good_window(&node, 7);
    say(TEST, &world, "ok");
}
