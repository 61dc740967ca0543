//! The figures: what is measured and reported of the process's memory and of the work
//! done. They read the mechanism and the policy; the units of work above write them.
//! One use runs up (as `tests/floors.rs` lists): `Report::measure` takes the `Arena`s
//! of `work/arena.rs` it measures.
//!
//! Its files, ground first (each uses only those listed before it):
//! - `bytes.rs`: `Bytes`, a byte count shown with units.
//! - `tally.rs`: the running totals of work by `Label`, the labels, arenas recycled.
//! - `memory.rs`: process figures (`rss`, `memory`), and `trim`.
//! - `stats.rs`: `stats()`, one snapshot by what each arena serves.
//! - `exposition.rs`: that snapshot as named metrics, and `write_prometheus`.
//! - `report.rs`: `Report`, what a scope or a job did to the process's memory.

pub(crate) mod bytes;
pub(crate) mod tally;

pub(crate) mod memory;
pub(crate) mod stats;

pub(crate) mod exposition;
pub(crate) mod report;
