//! Small-object churn: every task builds an ordered map of short strings (inserting,
//! then removing half), and the maps are held until the phase ends, then dropped.
//! Millions of 16-100 byte allocations, freed on a different thread than allocated.

use std::collections::BTreeMap;
use std::fmt;

use rayon::prelude::*;

use crate::phase::Phases;
use crate::rng::{mix, Rng};
use crate::{Executor, Scale};

/// Size of the churn phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    tasks: usize,
    entries: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            tasks: scale.pick(20, 300, 600, 1_200),
            entries: 1_000,
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tasks x {} string pairs inserted, half kept",
            self.tasks, self.entries
        )
    }
}

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    let phases = Phases::start();
    let maps: Vec<BTreeMap<String, String>> = exec.run(|| {
        (0..p.tasks)
            .into_par_iter()
            .map(|i| task(i, p.entries))
            .collect()
    });
    phases.end("built");
    let mut sum = 0;
    for map in &maps {
        let bytes: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        sum = mix(sum, (map.len() as u64) << 32 | bytes as u64);
    }
    drop(maps);
    phases.end("dropped");
    sum
}

fn task(i: usize, entries: usize) -> BTreeMap<String, String> {
    let mut rng = Rng::new(i as u64);
    let mut map = BTreeMap::new();
    for k in 0..entries {
        let len = rng.range(8, 96);
        let fill = char::from(b'a' + (k % 26) as u8);
        map.insert(format!("key-{i}-{k}"), fill.to_string().repeat(len));
    }
    for k in (0..entries).step_by(2) {
        map.remove(&format!("key-{i}-{k}"));
    }
    map
}
