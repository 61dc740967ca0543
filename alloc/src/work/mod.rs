//! The work: the units a program runs its work in (an arena, a binding, a scope, a
//! phase) and where their large blocks go. They use every layer below.
//!
//! Its files, ground first (each uses only those listed before it):
//! - `install.rs`: whether jemalloc is the allocator; the checks before binding and
//!   routing.
//! - `recycler.rs`: creating arenas, the free list.
//! - `percpu.rs`: a set of arenas made once, one per CPU.
//! - `binding.rs`: a thread's binding to an arena.
//! - `arena.rs`: `Arena`.
//! - `route.rs`: where a large block goes: `FLOOR`, the threshold, the phase arenas.
//! - `phase.rs`: the phase count and a phase's life.
//! - `scope.rs`: `with_arena` and its twins.
//! - `raw.rs`: `RawAlloc`, the phase's routing outside `GlobalAlloc`.

pub(crate) mod install;
pub(crate) mod recycler;

pub(crate) mod percpu;

pub(crate) mod binding;

pub(crate) mod arena;

pub(crate) mod route;

pub(crate) mod phase;
pub(crate) mod scope;

pub(crate) mod raw;
