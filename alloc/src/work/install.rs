//! Whether jemalloc is this program's allocator ([`is_installed`]), and the checks that
//! arenas can be bound and routed to, each with the error that says what to change.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::Error;
use crate::mechanism::ctl::{self, CtlError};

const UNKNOWN: u8 = 0;
const INSTALLED: u8 = 1;
const NOT_INSTALLED: u8 = 2;

/// Whether the global allocator is jemalloc ([`ArenaAlloc`](crate::ArenaAlloc), or
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

/// `Ok` when threads can be bound to arenas: jemalloc's controls answer,
/// [`ArenaAlloc`](crate::ArenaAlloc) is installed, and jemalloc does not tie threads to per-CPU arenas. Otherwise the
/// error that says what to change.
pub(crate) fn ensure_bindable() -> Result<(), Error> {
    bindable(ctl::available(), is_installed, ctl::percpu_arena)
}

/// `Ok` when allocations can be routed to arenas of this crate's: jemalloc's controls
/// answer and [`ArenaAlloc`](crate::ArenaAlloc) is installed. (jemalloc's `percpu_arena` does not matter:
/// a routed allocation names its arena.)
pub(crate) fn ensure_routable() -> Result<(), Error> {
    bindable(ctl::available(), is_installed, || Ok(false))
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
