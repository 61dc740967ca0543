//! The workloads: each one a shape of allocation that the field reports describe, run
//! identically under every contender.

mod churn;
mod cross_thread;
mod large_blocks;
mod larson;
mod s1_phase;
mod s1_repeated;
mod s2_stream;
mod s3_loop;

use crate::{Executor, Scale};

/// One workload of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// S1: a parallel phase of tasks returning 400 KB results, then dropped.
    S1Phase,
    /// S1 five times back to back.
    S1Repeated,
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
}

impl Workload {
    /// Every workload, in the order the suite runs them.
    pub const ALL: [Workload; 8] = [
        Workload::S1Phase,
        Workload::S1Repeated,
        Workload::S2Stream,
        Workload::S3Loop,
        Workload::Churn,
        Workload::CrossThread,
        Workload::Larson,
        Workload::LargeBlocks,
    ];

    /// The workload's name, as given to `--only`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::S1Phase => "s1-phase",
            Workload::S1Repeated => "s1-repeated",
            Workload::S2Stream => "s2-stream",
            Workload::S3Loop => "s3-loop",
            Workload::Churn => "churn",
            Workload::CrossThread => "cross-thread",
            Workload::Larson => "larson",
            Workload::LargeBlocks => "large-blocks",
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
            Workload::S1Repeated => {
                "S1 five times back to back: memory given back, then needed again"
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
        }
    }

    /// The workload's size at `scale`, in words (for tables and the results file).
    pub fn size(self, scale: Scale) -> String {
        match self {
            Workload::S1Phase => s1_phase::Params::new(scale).to_string(),
            Workload::S1Repeated => s1_repeated::Params::new(scale).to_string(),
            Workload::S2Stream => s2_stream::Params::new(scale).to_string(),
            Workload::S3Loop => s3_loop::Params::new(scale).to_string(),
            Workload::Churn => churn::Params::new(scale).to_string(),
            Workload::CrossThread => cross_thread::Params::new(scale).to_string(),
            Workload::Larson => larson::Params::new(scale).to_string(),
            Workload::LargeBlocks => large_blocks::Params::new(scale).to_string(),
        }
    }

    /// Runs the workload, printing its phase markers, and returns its checksum.
    pub(crate) fn run(self, exec: &Executor, scale: Scale) -> u64 {
        match self {
            Workload::S1Phase => s1_phase::run(exec, &s1_phase::Params::new(scale)),
            Workload::S1Repeated => s1_repeated::run(exec, &s1_repeated::Params::new(scale)),
            Workload::S2Stream => s2_stream::run(exec, &s2_stream::Params::new(scale)),
            Workload::S3Loop => s3_loop::run(exec, &s3_loop::Params::new(scale)),
            Workload::Churn => churn::run(exec, &churn::Params::new(scale)),
            Workload::CrossThread => cross_thread::run(exec, &cross_thread::Params::new(scale)),
            Workload::Larson => larson::run(exec, &larson::Params::new(scale)),
            Workload::LargeBlocks => large_blocks::run(exec, &large_blocks::Params::new(scale)),
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
