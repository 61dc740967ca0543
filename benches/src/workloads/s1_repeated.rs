//! S1 repeated: five S1 phases back to back, so that memory given back after one phase
//! is needed again by the next (what returning memory costs in time), with RSS marked
//! between the phases. The labels kept by each phase accumulate.

use std::fmt;

use crate::phase::Phases;
use crate::rng::mix;
use crate::workloads::s1_phase;
use crate::{Executor, Scale};

const ROUNDS: usize = 5;

/// Size of each of the five phases.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    phase: s1_phase::Params,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            phase: s1_phase::Params {
                tasks: scale.pick(20, 300, 1_000, 2_000),
                ..s1_phase::Params::new(scale)
            },
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ROUNDS} x ({})", self.phase)
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    const HELD: [&str; ROUNDS] = ["run1", "run2", "run3", "run4", "run5"];
    const DROPPED: [&str; ROUNDS] = ["dropped1", "dropped2", "dropped3", "dropped4", "dropped5"];
    s1_phase::warm_workers(exec);
    let phases = Phases::start();
    let mut sum = 0;
    let mut kept = Vec::new();
    for round in 0..ROUNDS {
        let (s, k) = s1_phase::phase(exec, &p.phase, round, &phases, HELD[round]);
        phases.end(DROPPED[round]);
        sum = mix(sum, s);
        kept.extend(k);
    }
    mix(sum, kept.iter().map(|s| s.len() as u64).sum())
}
