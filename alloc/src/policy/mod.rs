//! The policy: when and how much of what this crate's arenas and jemalloc's hold goes
//! back to the kernel. It uses the mechanism below it, and two files above it (as
//! `tests/floors.rs` lists): `purge.rs` counts into `figures/tally.rs`'s running
//! totals, and `phase_peak.rs` bounds the phase arenas of `work/route.rs`.
//!
//! Its files, ground first (each uses only those listed before it):
//! - `purge.rs`: a purge that is not skipped, the purge lock, failures counted.
//! - `decay.rs`: keep freed pages while work runs, give them back when it ends, stand by.
//! - `idle.rs`: give back what jemalloc's own arenas hold free once the process is idle.
//! - `background.rs`: jemalloc's background threads off, when asked.
//! - `phase_peak.rs`: the bound on the free pages the phase arenas keep while a phase is
//!   open.

pub(crate) mod purge;

pub(crate) mod background;
pub(crate) mod decay;
pub(crate) mod idle;
pub(crate) mod phase_peak;
