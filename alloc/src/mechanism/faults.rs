//! Fault injection, for tests: makes the calls this crate makes to the kernel and to
//! jemalloc fail at chosen or random points, as they fail when memory runs out or the
//! kernel refuses.
//!
//! Built only with the cargo feature `fault-injection`, which no release build should
//! turn on; without it every check below is the constant `false`, and nothing of this
//! module exists in the public API.
//!
#![cfg_attr(
    feature = "fault-injection",
    doc = r#"
```
use arenapool_alloc::faults::{self, Fault};
use arenapool_alloc::RawAlloc;

// The next attempt to map memory for an arena of this crate's fails: a block larger
// than any the arenas hold unused cannot be had.
faults::fail_every(Fault::Map, 1);
let block = RawAlloc::alloc(1 << 30, 64);
faults::fail_every(Fault::Map, 0);
assert!(block.is_null());
assert!(faults::injected(Fault::Map) > 0);
```
"#
)]

#[cfg_attr(not(feature = "fault-injection"), allow(unused_imports))]
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A kind of call that can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub enum Fault {
    /// The extent hooks' `mmap` of memory for an arena: jemalloc sees the hook fail, as
    /// when the kernel refuses (an address-space limit), and the allocation fails
    /// unless another arena has room.
    Map,
    /// A call that gives pages back (`madvise`) in the extent hooks: each attempt fails
    /// as if the kernel answered `EAGAIN`.
    GiveBack,
    /// A call to jemalloc's control interface (`mallctl`): it fails with `EAGAIN`.
    Control,
    /// The look-up of glibc's `mallinfo2` (made once per process): it is not found, as
    /// with glibc before 2.33, and [`c_heap`](crate::c_heap)'s figures come from
    /// `mallinfo`.
    Mallinfo2,
}

/// Per kind of fault: every how many calls one fails (0: none), the state of the
/// random choice (0: not random), and how many failed.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
struct Plan {
    every: AtomicU32,
    random: AtomicU64,
    calls: AtomicU64,
    injected: AtomicU64,
}

#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
static PLANS: [Plan; 4] = [const {
    Plan {
        every: AtomicU32::new(0),
        random: AtomicU64::new(0),
        calls: AtomicU64::new(0),
        injected: AtomicU64::new(0),
    }
}; 4];

#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
fn plan(fault: Fault) -> &'static Plan {
    &PLANS[fault as usize]
}

/// Makes one call of kind `fault` in every `n` fail (0: none), counted from now; ends a
/// random plan of the same kind.
#[cfg(feature = "fault-injection")]
pub fn fail_every(fault: Fault, n: u32) {
    let plan = plan(fault);
    plan.random.store(0, Ordering::Relaxed);
    plan.calls.store(0, Ordering::Relaxed);
    plan.every.store(n, Ordering::Relaxed);
}

/// Makes each call of kind `fault` fail with probability 1 in `n` (0: none), by a
/// pseudo-random sequence from `seed`, the same for the same seed and order of calls.
#[cfg(feature = "fault-injection")]
pub fn fail_randomly(fault: Fault, n: u32, seed: u64) {
    let plan = plan(fault);
    plan.every.store(n, Ordering::Relaxed);
    // The state of an xorshift generator is never 0.
    plan.random.store(seed | 1, Ordering::Relaxed);
}

/// How many calls of kind `fault` were made to fail so far.
#[cfg(feature = "fault-injection")]
pub fn injected(fault: Fault) -> u64 {
    plan(fault).injected.load(Ordering::Relaxed)
}

/// Whether this call of kind `fault` is to fail. A few atomic operations; no lock, no
/// allocation (the extent hooks call it inside jemalloc). Always `false` without the
/// feature.
#[inline]
pub(crate) fn should_fail(fault: Fault) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        let plan = plan(fault);
        let every = plan.every.load(Ordering::Relaxed);
        if every == 0 {
            return false;
        }
        let fail = if plan.random.load(Ordering::Relaxed) == 0 {
            (plan.calls.fetch_add(1, Ordering::Relaxed) + 1) % u64::from(every) == 0
        } else {
            let step = |mut x: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Some(x)
            };
            let before = plan
                .random
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, step)
                .unwrap_or(1);
            step(before).unwrap_or(1) % u64::from(every) == 0
        };
        if fail {
            plan.injected.fetch_add(1, Ordering::Relaxed);
        }
        fail
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = fault;
        false
    }
}
