//! The warm heap: the same S1-shaped parallel job (tasks returning 400 KB results) run
//! back to back, the results dropped after each run, and each run timed. An allocator
//! that keeps freed memory serves the later runs from a warm heap; one that gives it
//! back faults it in again on every run, and this shows what that costs.

use std::fmt;

use rayon::prelude::*;

use crate::phase::Phases;
use crate::rng::mix;
use crate::workloads::s1_phase;
use crate::{Executor, Scale};

const RUNS: usize = 6;
const MARKS: [&str; RUNS] = ["run1", "run2", "run3", "run4", "run5", "run6"];

/// Size of each run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    job: s1_phase::Params,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            job: s1_phase::Params {
                tasks: scale.pick(20, 250, 500, 1_000),
                ..s1_phase::Params::new(scale)
            },
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{RUNS} runs of ({}), each dropped", self.job)
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    s1_phase::warm_workers(exec);
    let phases = Phases::start();
    let mut sum = 0;
    for mark in MARKS {
        let results: Vec<(String, Vec<f64>)> = exec.run(|| {
            (0..p.job.tasks)
                .into_par_iter()
                .map(|i| s1_phase::task(i, p.job.len))
                .collect()
        });
        for (i, (label, values)) in results.iter().enumerate() {
            sum = mix(sum, values[i % values.len()].to_bits() ^ label.len() as u64);
        }
        drop(results);
        phases.end(mark);
    }
    sum
}
