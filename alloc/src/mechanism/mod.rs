//! The mechanism: what talks to jemalloc, the C library and the kernel, and the state
//! they share. Nothing here decides when or how much memory goes back; it uses no other
//! layer.
//!
//! Its files, ground first (each uses only those listed before it):
//! - `faults.rs`: fault injection for tests (feature `fault-injection`).
//! - `c_heap.rs`: the C library's `malloc` heaps: glibc's figures and its trim.
//! - `ctl.rs`: every jemalloc control call, the MIBs looked up once.
//! - `fork.rs`: the fork gate, `Lock`, the `fork` handlers, the fork generation.
//! - `huge.rs`: the huge-page setting, and whether the kernel gives huge pages.
//! - `map.rs`: the map of the address space, each 2 MiB granule's arena.
//! - `table.rs`: each arena's state, one entry per index.
//! - `hooks/`: the extent hooks jemalloc calls to map memory and give pages back.

#[cfg(feature = "fault-injection")]
pub mod faults;
#[cfg(not(feature = "fault-injection"))]
pub(crate) mod faults;

pub(crate) mod c_heap;
pub(crate) mod ctl;
pub(crate) mod fork;
pub(crate) mod huge;

pub(crate) mod map;
pub(crate) mod table;

pub(crate) mod hooks;
