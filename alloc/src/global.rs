//! `ArenaAlloc`, the global allocator, and the check that it is installed.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU8, Ordering};

use tikv_jemallocator::Jemalloc;

use crate::ctl::{self, CtlError};
use crate::Error;

/// jemalloc as the global allocator, with arenas that scopes can bind and purge.
///
/// Install it once in the binary:
///
/// ```
/// #[global_allocator]
/// static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// # fn main() {}
/// ```
///
/// Outside any scope it *is* [`tikv_jemallocator::Jemalloc`]: every method forwards to
/// it unchanged, with no check, counter or branch added, so the hot path costs the same.
/// Which arena an allocation comes from is decided inside jemalloc by the calling
/// thread's binding, which scopes change through jemalloc's control interface.
/// Nothing unwinds out of these methods: jemalloc reports failure with a null pointer.
#[derive(Debug, Default, Clone, Copy)]
pub struct ArenaAlloc;

// SAFETY: every method forwards to `Jemalloc`, a correct `GlobalAlloc`, with the same
// arguments and the same contract.
unsafe impl GlobalAlloc for ArenaAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
        unsafe { Jemalloc.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { Jemalloc.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator, i.e. by `Jemalloc`, with `layout`.
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was returned by this allocator, i.e. by `Jemalloc`, with `layout`.
        unsafe { Jemalloc.realloc(ptr, layout, new_size) }
    }
}

const UNKNOWN: u8 = 0;
const INSTALLED: u8 = 1;
const NOT_INSTALLED: u8 = 2;

/// Whether the global allocator is jemalloc ([`ArenaAlloc`], or
/// `tikv_jemallocator::Jemalloc`, which is the same library). Checked once, then cached.
///
/// Arenas only hold memory that jemalloc hands out; under any other global allocator
/// binding a thread to one changes nothing.
pub fn is_installed() -> bool {
    match STATE.load(Ordering::Relaxed) {
        INSTALLED => true,
        NOT_INSTALLED => false,
        _ => {
            let installed = probe();
            let state = if installed { INSTALLED } else { NOT_INSTALLED };
            STATE.store(state, Ordering::Relaxed);
            installed
        }
    }
}

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Allocates one block through the global allocator and asks jemalloc whether it saw it.
/// `false` also when jemalloc's counters cannot be read (then [`ensure_bindable`]
/// reports the control that failed, not this).
fn probe() -> bool {
    const SIZE: usize = 4096;
    let Ok((before, _)) = ctl::thread_counters() else {
        return false;
    };
    let block = std::hint::black_box(vec![1u8; SIZE]);
    let after = ctl::thread_counters().map_or(before, |(allocated, _)| allocated);
    drop(block);
    after.wrapping_sub(before) >= SIZE as u64
}

/// `Ok` when threads can be bound to arenas: jemalloc's controls answer, [`ArenaAlloc`]
/// is installed, and jemalloc does not tie threads to per-CPU arenas. Otherwise the
/// error that says what to change.
pub(crate) fn ensure_bindable() -> Result<(), Error> {
    bindable(ctl::available(), is_installed, ctl::percpu_arena)
}

/// The order of [`ensure_bindable`]'s checks: a control that fails is reported as
/// itself, before "not installed" (whose probe reads controls too and would only say
/// that it could not tell).
fn bindable(
    controls: Result<(), CtlError>,
    installed: impl FnOnce() -> bool,
    percpu_arena: impl FnOnce() -> Result<bool, CtlError>,
) -> Result<(), Error> {
    controls?;
    if !installed() {
        Err(Error::not_installed())
    } else if percpu_arena()? {
        Err(Error::percpu_arena())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_control_is_reported_as_itself() {
        let failed = CtlError {
            name: "thread.allocatedp",
            errno: libc::ENOENT,
        };
        // The probe cannot tell when controls fail, so it answers "not installed";
        // the error must still name the control.
        let e = bindable(Err(failed), || false, || Ok(false)).unwrap_err();
        assert!(!e.is_not_installed(), "{e}");
        assert!(e.to_string().contains("thread.allocatedp"), "{e}");
    }

    #[test]
    fn checks_installed_then_percpu() {
        let e = bindable(Ok(()), || false, || Ok(true)).unwrap_err();
        assert!(e.is_not_installed());
        let e = bindable(Ok(()), || true, || Ok(true)).unwrap_err();
        assert!(e.is_percpu_arena());
        assert!(bindable(Ok(()), || true, || Ok(false)).is_ok());
    }
}
