//! The workloads: the field reports' shapes, and ports of the allocator benchmarks
//! that stress what allocators differ on, run identically under every contender.

mod alloc_test;
mod cache_scratch;
mod churn;
mod cross_thread;
mod large_blocks;
mod larson;
mod mleak;
mod mstress;
mod rptest;
mod s1_grow;
mod s1_phase;
mod s1_repeated;
mod s2_stream;
mod s3_loop;
mod sh6bench;
mod sh8bench;
mod warm_heap;
mod xmalloc;

use crate::{Executor, Scale};

/// One workload of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// S1: a parallel phase of tasks returning 400 KB results, then dropped.
    S1Phase,
    /// S1 with every result grown by `push` from an empty `Vec`.
    S1Grow,
    /// S1 five times back to back.
    S1Repeated,
    /// The same S1-shaped job run back to back, each run timed.
    WarmHeap,
    /// S2: a shared read-only state and big results streamed one by one.
    S2Stream,
    /// S3: many short parallel jobs in a loop.
    S3Loop,
    /// Small objects: a map of strings built per task.
    Churn,
    /// Objects allocated on one thread and freed on another.
    CrossThread,
    /// Server-like churn: random sizes in random slots, freed by other threads.
    Larson,
    /// Blocks of 5–25 MiB, the mmap-threshold regime.
    LargeBlocks,
    /// Many producers, many consumers through one shared stack.
    Xmalloc,
    /// Passive false sharing.
    CacheScratch,
    /// Threads destroyed and recreated while objects outlive them.
    Mstress,
    /// Threads that allocate and exit: retention from dead threads.
    Mleak,
    /// LIFO and in-order frees of small objects.
    Sh6bench,
    /// Ordered frees with a quarter of them cross-thread.
    Sh8bench,
    /// Pareto-distributed sizes in a working set.
    AllocTest,
    /// Batches of mixed sizes with cross-thread frees.
    Rptest,
}

impl Workload {
    /// Every workload, in the order the suite runs them.
    pub const ALL: [Workload; 18] = [
        Workload::S1Phase,
        Workload::S1Grow,
        Workload::S1Repeated,
        Workload::WarmHeap,
        Workload::S2Stream,
        Workload::S3Loop,
        Workload::Churn,
        Workload::CrossThread,
        Workload::Larson,
        Workload::LargeBlocks,
        Workload::Xmalloc,
        Workload::CacheScratch,
        Workload::Mstress,
        Workload::Mleak,
        Workload::Sh6bench,
        Workload::Sh8bench,
        Workload::AllocTest,
        Workload::Rptest,
    ];

    /// The workload's name, as given to `--only`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::S1Phase => "s1-phase",
            Workload::S1Grow => "s1-grow",
            Workload::S1Repeated => "s1-repeated",
            Workload::WarmHeap => "warm-heap",
            Workload::S2Stream => "s2-stream",
            Workload::S3Loop => "s3-loop",
            Workload::Churn => "churn",
            Workload::CrossThread => "cross-thread",
            Workload::Larson => "larson",
            Workload::LargeBlocks => "large-blocks",
            Workload::Xmalloc => "xmalloc",
            Workload::CacheScratch => "cache-scratch",
            Workload::Mstress => "mstress",
            Workload::Mleak => "mleak",
            Workload::Sh6bench => "sh6bench",
            Workload::Sh8bench => "sh8bench",
            Workload::AllocTest => "alloc-test",
            Workload::Rptest => "rptest",
        }
    }

    /// Looks a workload up by [`name`](Workload::name).
    pub fn from_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }

    /// What the workload stands for, in one line.
    pub fn description(self) -> &'static str {
        match self {
            Workload::S1Phase => {
                "S1: parallel tasks return 400 KB results, all dropped after the phase"
            }
            Workload::S1Grow => {
                "S1 with every result grown by push from an empty Vec: the freed blocks \
                 of every growth step in play"
            }
            Workload::S1Repeated => {
                "S1 five times back to back: memory given back, then needed again"
            }
            Workload::WarmHeap => {
                "the same S1 job run back to back, each run timed: what refaulting costs"
            }
            Workload::S2Stream => {
                "S2: shared read-only state, big results streamed and consumed one by one"
            }
            Workload::S3Loop => "S3: a loop of short parallel jobs; RSS must stay flat",
            Workload::Churn => "small objects: a map of strings built per task, held, then dropped",
            Workload::CrossThread => "cross-thread free: a producer allocates, a consumer frees",
            Workload::Larson => {
                "server churn: random sizes in random slots, freed by the other thread"
            }
            Workload::LargeBlocks => "large blocks of 5-25 MiB, two held per thread",
            Workload::Xmalloc => {
                "xmalloc-test: every thread produces and consumes through one shared stack"
            }
            Workload::CacheScratch => {
                "cache-scratch: passive false sharing between threads' small objects"
            }
            Workload::Mstress => {
                "mstress: threads destroyed and recreated while their objects survive"
            }
            Workload::Mleak => {
                "mleak: threads allocate and exit; retention from dead threads must stay flat"
            }
            Workload::Sh6bench => "sh6bench: small objects freed LIFO and in allocation order",
            Workload::Sh8bench => "sh8bench: ordered frees, a quarter by another thread",
            Workload::AllocTest => "alloc-test: Pareto-distributed sizes in a working set",
            Workload::Rptest => {
                "rptest: batches of 16 B-32 KiB blocks, one in four freed by another thread"
            }
        }
    }

    /// Whether the time of each phase is worth a table of its own (the runs of the
    /// repeated workloads).
    pub fn times_each_phase(self) -> bool {
        matches!(self, Workload::S1Repeated | Workload::WarmHeap)
    }

    /// The workload's size at `scale`, in words (for tables and the results file).
    pub fn size(self, scale: Scale) -> String {
        match self {
            Workload::S1Phase => s1_phase::Params::new(scale).to_string(),
            Workload::S1Grow => s1_grow::Params::new(scale).to_string(),
            Workload::S1Repeated => s1_repeated::Params::new(scale).to_string(),
            Workload::WarmHeap => warm_heap::Params::new(scale).to_string(),
            Workload::S2Stream => s2_stream::Params::new(scale).to_string(),
            Workload::S3Loop => s3_loop::Params::new(scale).to_string(),
            Workload::Churn => churn::Params::new(scale).to_string(),
            Workload::CrossThread => cross_thread::Params::new(scale).to_string(),
            Workload::Larson => larson::Params::new(scale).to_string(),
            Workload::LargeBlocks => large_blocks::Params::new(scale).to_string(),
            Workload::Xmalloc => xmalloc::Params::new(scale).to_string(),
            Workload::CacheScratch => cache_scratch::Params::new(scale).to_string(),
            Workload::Mstress => mstress::Params::new(scale).to_string(),
            Workload::Mleak => mleak::Params::new(scale).to_string(),
            Workload::Sh6bench => sh6bench::Params::new(scale).to_string(),
            Workload::Sh8bench => sh8bench::Params::new(scale).to_string(),
            Workload::AllocTest => alloc_test::Params::new(scale).to_string(),
            Workload::Rptest => rptest::Params::new(scale).to_string(),
        }
    }

    /// Runs the workload, printing its phase markers, and returns its checksum.
    pub(crate) fn run(self, exec: &Executor, scale: Scale) -> u64 {
        match self {
            Workload::S1Phase => s1_phase::run(exec, &s1_phase::Params::new(scale)),
            Workload::S1Grow => s1_grow::run(exec, &s1_grow::Params::new(scale)),
            Workload::S1Repeated => s1_repeated::run(exec, &s1_repeated::Params::new(scale)),
            Workload::WarmHeap => warm_heap::run(exec, &warm_heap::Params::new(scale)),
            Workload::S2Stream => s2_stream::run(exec, &s2_stream::Params::new(scale)),
            Workload::S3Loop => s3_loop::run(exec, &s3_loop::Params::new(scale)),
            Workload::Churn => churn::run(exec, &churn::Params::new(scale)),
            Workload::CrossThread => cross_thread::run(exec, &cross_thread::Params::new(scale)),
            Workload::Larson => larson::run(exec, &larson::Params::new(scale)),
            Workload::LargeBlocks => large_blocks::run(exec, &large_blocks::Params::new(scale)),
            Workload::Xmalloc => xmalloc::run(exec, &xmalloc::Params::new(scale)),
            Workload::CacheScratch => cache_scratch::run(exec, &cache_scratch::Params::new(scale)),
            Workload::Mstress => mstress::run(exec, &mstress::Params::new(scale)),
            Workload::Mleak => mleak::run(exec, &mleak::Params::new(scale)),
            Workload::Sh6bench => sh6bench::run(exec, &sh6bench::Params::new(scale)),
            Workload::Sh8bench => sh8bench::run(exec, &sh8bench::Params::new(scale)),
            Workload::AllocTest => alloc_test::run(exec, &alloc_test::Params::new(scale)),
            Workload::Rptest => rptest::run(exec, &rptest::Params::new(scale)),
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
