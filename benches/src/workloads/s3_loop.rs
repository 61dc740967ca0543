//! S3 loop: a long loop of short parallel jobs (each a few small tasks), as a program
//! that opens a scope or job per iteration does. Whatever a job leaves behind (an
//! arena, metadata, a cache) shows up as RSS growth across the loop, marked at each
//! fifth of it.

use std::fmt;

use rayon::prelude::*;

use crate::phase::Phases;
use crate::rng::mix;
use crate::{Executor, Scale};

/// Size of the S3 loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    jobs: usize,
    tasks: u64,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            jobs: scale.pick(500, 10_000, 30_000, 100_000),
            tasks: 8,
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} jobs x {} tasks of 2-5 KB", self.jobs, self.tasks)
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    const MARKS: [&str; 5] = ["loop1", "loop2", "loop3", "loop4", "loop5"];
    let phases = Phases::start();
    let mut sum = 0;
    let per_mark = p.jobs.div_ceil(MARKS.len());
    for job in 0..p.jobs {
        let value: u64 = exec.run(|| {
            (0..p.tasks)
                .into_par_iter()
                .map(|t| {
                    let len = 2048 + ((job as u64 + t) % 7) as usize * 512;
                    let scratch = vec![(t + 1) as u8; len];
                    scratch.iter().map(|&b| b as u64).sum::<u64>()
                })
                .sum()
        });
        sum = mix(sum, value);
        if (job + 1) % per_mark == 0 || job + 1 == p.jobs {
            phases.end(MARKS[job / per_mark]);
        }
    }
    sum
}
