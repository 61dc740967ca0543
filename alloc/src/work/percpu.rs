//! A set of this crate's arenas, one per CPU, made once and kept for the process's life:
//! the arenas of phases, and those of [`RawAlloc`](crate::RawAlloc) outside phases.
//!
//! A thread picks the arena of the CPU it runs on (`sched_getcpu`, which glibc answers
//! from memory), so threads on different CPUs never share an arena's locks, and no lock
//! is taken to choose: two loads. A thread moved to another CPU between choosing and
//! allocating only shares an arena for that allocation.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::error::Error;
use crate::mechanism::ctl::CtlResult;
use crate::mechanism::fork::Lock;
use crate::mechanism::table::Use;
use crate::work::recycler;

/// The most arenas a set has: CPUs beyond share them.
const MAX: usize = 256;

pub(crate) struct PerCpu {
    /// How many of `indices` are made; 0 until [`PerCpu::make`] succeeds.
    len: AtomicUsize,
    indices: [AtomicU32; MAX],
    making: Lock<()>,
}

impl PerCpu {
    pub(crate) const fn new() -> Self {
        PerCpu {
            len: AtomicUsize::new(0),
            indices: [const { AtomicU32::new(0) }; MAX],
            making: Lock::new(()),
        }
    }

    /// Makes the set, once: an arena per CPU the system has, with huge pages if `huge`,
    /// serving `serves`, each set up by `setup`.
    /// If jemalloc's limit of arenas is reached on the way, the set is the arenas made
    /// so far, or the error if there are none.
    pub(crate) fn make(
        &self,
        huge: bool,
        serves: Use,
        setup: fn(u32) -> CtlResult<()>,
    ) -> Result<(), Error> {
        if self.len.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        let _making = self.making.lock();
        if self.len.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        let mut made = 0;
        let mut failed = None;
        for slot in &self.indices[..cpus()] {
            match recycler::acquire_for_life(huge, serves).and_then(|i| Ok(setup(i).map(|()| i)?)) {
                Ok(index) => {
                    slot.store(index, Ordering::Relaxed);
                    made += 1;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match (made, failed) {
            (0, Some(e)) => Err(e),
            _ => {
                // Release: whoever sees the length sees the indices.
                self.len.store(made, Ordering::Release);
                Ok(())
            }
        }
    }

    /// The arena of the CPU the calling thread runs on, `None` before the set is made.
    #[inline]
    pub(crate) fn pick(&self) -> Option<u32> {
        let len = self.len.load(Ordering::Acquire);
        if len == 0 {
            return None;
        }
        // SAFETY: `sched_getcpu` has no preconditions; it fails with -1.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0);
        Some(self.indices[cpu % len].load(Ordering::Relaxed))
    }

    /// The set's arenas (none before it is made).
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        let len = self.len.load(Ordering::Acquire);
        self.indices[..len]
            .iter()
            .map(|i| i.load(Ordering::Relaxed))
    }
}

/// CPUs the system has (not only those this process may run on: `sched_getcpu` can
/// answer any of them), at least 1 and at most [`MAX`].
fn cpus() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).clamp(1, MAX)
}
