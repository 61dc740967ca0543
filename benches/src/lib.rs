//! The allocator benchmark suite: glibc, jemalloc, mimalloc (each as it comes and with
//! the settings users apply to get memory back), rpmalloc, snmalloc, TCMalloc and
//! arenapool run the same workloads side by side, and what is measured is not only time
//! and peak RSS but the RSS left *after* each phase.
//!
//! Run it with `cargo run --release -p arenapool-bench` (see `docs/benchmarks.md`).
//!
//! Layout: every contender is a binary of its own that installs its global allocator
//! and calls [`child_main`]; the runner binary calls [`run_suite`], which starts one
//! child process per (contender, workload, repetition), samples its RSS and its memory
//! in transparent huge pages from `/proc`, reads the phase markers it prints (`PHASE`
//! lines), takes its time, peak RSS and minor page faults when it is reaped, and writes
//! a table, a results file and SVG charts.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, missing_debug_implementations)]

mod charts;
mod child;
mod contender;
mod executor;
mod options;
mod phase;
mod results;
mod rng;
mod runner;
mod sampler;
mod smaps;
mod stats;
mod summary;
mod table;
mod tuning;
mod workloads;

pub use self::child::child_main;
pub use self::contender::{
    Contender, GLIBC_TRIM_THRESHOLD, JEMALLOC_BG500_CONF, JEMALLOC_THP_CONF, JEMALLOC_TUNED_CONF,
};
pub use self::executor::Executor;
pub use self::options::{Command, Options, Scale};
pub use self::phase::{Marker, Message};
pub use self::results::{Results, Run, RunStatus, Summary};
pub use self::runner::run_suite;
pub use self::sampler::{Sample, Sampler};
pub use self::stats::Spread;
pub use self::summary::Overall;
pub use self::workloads::Workload;
