//! A set of this crate's arenas, one per CPU, made once and kept for the process's life:
//! the arenas of phases, and those of [`RawAlloc`](crate::RawAlloc) outside phases.
//!
//! Each thread keeps one arena of each set: the threads of the process take turns at
//! their first pick, so they spread over the arenas as jemalloc spreads threads over
//! its own, and no lock is taken to choose (a thread-local read and two loads). The
//! arena of the CPU the thread runs on was the choice before, but the scheduler moves a
//! thread between CPUs, and its blocks then spread over every arena of the set: a
//! buffer freed in one arena is no use to the next one asked for in another, and each
//! arena kept free pages of its own. In the joblib report's program, the parent's
//! thread that receives the results moves between the 2 CPUs while the workers run: it
//! faulted 1.59–1.64 M pages over the job in a phase, 1.17–1.46 M with an arena of its
//! own, and 0.61–0.90 M with that and the phase arenas' bound at four times the largest
//! block (1.08–1.09 M with glibc; four runs each).

use std::cell::Cell;
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

    /// The calling thread's arena of the set (see the module's docs), `None` before the
    /// set is made.
    #[inline]
    pub(crate) fn pick(&self) -> Option<u32> {
        let len = self.len.load(Ordering::Acquire);
        if len == 0 {
            return None;
        }
        Some(self.indices[turn() % len].load(Ordering::Relaxed))
    }

    /// The set's arenas (none before it is made).
    pub(crate) fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        let len = self.len.load(Ordering::Acquire);
        self.indices[..len]
            .iter()
            .map(|i| i.load(Ordering::Relaxed))
    }
}

thread_local! {
    /// The calling thread's turn: which arena of each set it takes (modulo the set's
    /// length), given at its first pick; `usize::MAX` until then.
    static TURN: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The next thread's turn.
static NEXT_TURN: AtomicUsize = AtomicUsize::new(0);

/// The calling thread's turn (see [`TURN`]), given now if it has none; the CPU it runs
/// on if its thread-local storage is gone (a thread that is ending).
#[inline]
fn turn() -> usize {
    TURN.try_with(|turn| {
        if turn.get() == usize::MAX {
            turn.set(NEXT_TURN.fetch_add(1, Ordering::Relaxed) % MAX);
        }
        turn.get()
    })
    .unwrap_or_else(|_| {
        // SAFETY: `sched_getcpu` has no preconditions; it fails with -1.
        usize::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0)
    })
}

/// CPUs the system has (not only those this process may run on: `sched_getcpu` can
/// answer any of them), at least 1 and at most [`MAX`].
fn cpus() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).clamp(1, MAX)
}
