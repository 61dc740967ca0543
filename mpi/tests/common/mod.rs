//! What the MPI test programs share: start-up, per-rank output, and memory figures.
//!
//! Each test is a program of its own (`harness = false`), run under `mpirun`, so that
//! the RSS it measures is its own. It exits non-zero on any rank if a check fails, and
//! `mpirun` then fails too.

// Each test binary uses part of this module.
#![allow(dead_code)]

use arenapool_mpi::{node_shmem, rss_shmem};
use mpi::collective::SystemOperation;
use mpi::traits::{Communicator, CommunicatorCollectives};

pub const MIB: usize = 1 << 20;

/// Prints one line prefixed with the test's name and the world rank.
pub fn say(test: &str, world: &impl Communicator, line: &str) {
    println!("{test}[{}/{}]: {line}", world.rank(), world.size());
}

/// `bytes` in MiB with one decimal, signed.
pub fn mib(bytes: i64) -> String {
    format!("{:+.1} MiB", bytes as f64 / MIB as f64)
}

/// RSS, RSS in shared memory, and the machine's shared memory, at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub rss: usize,
    pub rss_shmem: usize,
    pub node_shmem: usize,
}

impl Figures {
    pub fn now() -> Figures {
        Figures {
            rss: arenapool_alloc::rss(),
            rss_shmem: rss_shmem(),
            node_shmem: node_shmem(),
        }
    }

    /// Growth from `self` to `later`, per figure, in bytes.
    pub fn growth(&self, later: &Figures) -> [i64; 3] {
        [
            later.rss as i64 - self.rss as i64,
            later.rss_shmem as i64 - self.rss_shmem as i64,
            later.node_shmem as i64 - self.node_shmem as i64,
        ]
    }
}

/// Whether `ok` holds on every rank of `world` (collective).
pub fn all_ranks(world: &impl CommunicatorCollectives, ok: bool) -> bool {
    let mine = u32::from(ok);
    let mut all = 0u32;
    world.all_reduce_into(&mine, &mut all, SystemOperation::min());
    all == 1
}

/// The sum of `value` over every rank of `world` (collective).
pub fn sum_ranks(world: &impl CommunicatorCollectives, value: u64) -> u64 {
    let mut sum = 0u64;
    world.all_reduce_into(&value, &mut sum, SystemOperation::sum());
    sum
}

/// Doubles in one S1 result: 50,000 f64, about 400 KB.
pub const S1_LEN: usize = 50_000;

/// One S1 task: a scratch array and small temporaries, freed inside; a 400 KB result
/// and a short label, returned. Every byte of the result is written.
pub fn s1_task(i: usize) -> (Vec<f64>, String) {
    let x = i as f64;
    let scratch: Vec<f64> = (0..S1_LEN).map(|k| x + k as f64).collect();
    let small: Vec<Vec<u32>> = (0..8u32).map(|k| vec![k; 32 << k]).collect();
    let mut result: Vec<f64> = scratch.iter().map(|v| v * 0.5).collect();
    result[0] = small.iter().map(Vec::len).sum::<usize>() as f64;
    (result, format!("result-{i:07}"))
}

/// Checks what `s1_task(i)` returned.
pub fn check_s1(i: usize, (result, label): &(Vec<f64>, String)) {
    assert_eq!(result.len(), S1_LEN, "task {i}");
    assert_eq!(result[0], (32.0 * 255.0), "task {i}");
    assert_eq!(
        result[S1_LEN - 1],
        (i as f64 + (S1_LEN - 1) as f64) * 0.5,
        "task {i}"
    );
    assert_eq!(label, &format!("result-{i:07}"));
}

/// Worker threads for one rank's pool: the machine's cores shared by the node's ranks.
pub fn threads_per_rank(node_size: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / node_size.max(1)).max(1)
}
