//! S2 stream: a large read-only state shared by every task (through an `Arc`, never
//! copied), many inputs each producing a big result with scratch memory on the side,
//! streamed in input order and consumed (then freed) one by one. Peak RSS should be
//! the state plus a window of results, not all results.

use std::fmt;
use std::sync::Arc;

use arenapool_alloc::Bytes;

use crate::phase::Phases;
use crate::rng::mix;
use crate::{Executor, Scale};

/// Size of the S2 stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// f64 values in the shared state.
    state: usize,
    /// Inputs streamed.
    inputs: usize,
    /// f64 values per result (the scratch is half that).
    result: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            state: scale.pick(1 << 16, 8 << 20, 32 << 20, 64 << 20),
            inputs: scale.pick(8, 20, 100, 200),
            result: scale.pick(1 << 14, 1 << 19, 1 << 20, 2 << 20),
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} state, {} inputs x {} results",
            Bytes(self.state * 8),
            self.inputs,
            Bytes(self.result * 8)
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let state: Arc<Vec<f64>> = Arc::new((0..p.state).map(|i| 1.0 + (i % 1024) as f64).collect());
    let phases = Phases::start();
    let len = p.result;
    let shared = Arc::clone(&state);
    let mut sum = 0;
    for (i, result) in exec
        .map_stream(0..p.inputs, move |x| task(&shared, x, len))
        .enumerate()
    {
        let consumed: f64 = result.iter().step_by(8).sum();
        sum = mix(sum, consumed.to_bits() ^ i as u64);
    }
    phases.end("streamed");
    sum
}

/// One input: scratch derived from the state, then a result from both.
fn task(state: &[f64], x: usize, len: usize) -> Vec<f64> {
    let n = state.len();
    let scratch: Vec<f64> = (0..len / 2)
        .map(|j| state[(x * 7919 + j * 13) % n] * 0.5)
        .collect();
    (0..len)
        .map(|j| state[(x * 104_729 + j) % n] + scratch[j / 2])
        .collect()
}
