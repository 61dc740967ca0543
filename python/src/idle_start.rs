//! When the hooks' idle return starts its thread (`arenapool_alloc::idle_return`, the
//! thread that gives back what the hooks' arenas hold free once the process is idle).
//!
//! `arenapool.install()` starts it as it installs the hooks. The start under
//! `ARENAPOOL=on` does not: it arms it ([`arm`]), and the thread starts once the hooks
//! have taken [`WORK`] bytes of blocks. Until then what the hooks' arenas could give
//! back is less than that, and a second thread is not free: the C library then locks
//! and unlocks each of its mutexes (those of `malloc` and of every `FILE`) with atomic
//! instructions, where a process of one thread does without, and `os.fork()` warns
//! that the process has threads on Python 3.12 and later. A command that allocates
//! little (`python -c pass`, a script's `--help`) never starts it.
//!
//! The thread is never started inside the allocator: starting a thread allocates and
//! takes the C library's locks. The block that reaches [`WORK`] asks the interpreter
//! for a pending call (`Py_AddPendingCall`), which its main thread makes between two
//! bytecodes, with the interpreter's lock and outside any allocator. Only a thread that
//! holds the interpreter's lock asks, while the interpreter is not finalizing: the
//! pending calls' lock is the interpreter's, and finalization frees it. A block taken
//! by a thread without it asks at the next block taken with it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use pyo3::ffi;

use crate::route;

extern "C" {
    // Every CPython from 3.4 on (not part of the limited API): whether this thread
    // holds the interpreter's lock (1 also where the interpreter cannot tell).
    fn PyGILState_Check() -> c_int;
}

/// The bytes of blocks the hooks take, once armed, before the thread starts: what the
/// idle return counts as a round of work (`arenapool_alloc`'s idle module).
const WORK: usize = 4 << 20;

/// Where the start stands: one of the four below.
static STATE: AtomicU8 = AtomicU8::new(UNARMED);
/// Nothing to do: not armed, and not started by this module.
const UNARMED: u8 = 0;
/// Armed: blocks taken are counted in [`TAKEN`].
const ARMED: u8 = 1;
/// The pending call is asked for, not made yet.
const ASKED: u8 = 2;
/// Started (or asked to start at once): nothing to do.
const STARTED: u8 = 3;

/// Bytes of blocks taken since [`arm`].
static TAKEN: AtomicUsize = AtomicUsize::new(0);

/// Starts the thread now (`arenapool.install()`): outside the allocator.
pub(crate) fn now() {
    STATE.store(STARTED, Ordering::SeqCst);
    let _ = arenapool_alloc::idle_return();
}

/// Arms the start (the start under `ARENAPOOL=on`): the thread starts once the hooks
/// have taken [`WORK`] bytes. Nothing if it started already.
pub(crate) fn arm() {
    if STATE.load(Ordering::SeqCst) != STARTED {
        TAKEN.store(0, Ordering::Relaxed);
        STATE.store(ARMED, Ordering::SeqCst);
    }
}

/// In a child made by `fork`, with the hooks taking blocks: the parent's thread is not
/// there. The child starts its own at once if the parent had started one, and is armed
/// again, with its own count, if the parent was armed. Outside the allocator.
pub(crate) fn after_fork_in_child() {
    match STATE.load(Ordering::SeqCst) {
        STARTED => now(),
        ARMED | ASKED => arm(),
        _ => {}
    }
}

/// Called by the hooks for each block they take, of `size` bytes, inside the
/// allocator: one relaxed load unless armed.
#[inline]
pub(crate) fn taken(size: usize) {
    if STATE.load(Ordering::Relaxed) == ARMED {
        count(size);
    }
}

#[cold]
#[inline(never)]
fn count(size: usize) {
    if TAKEN
        .fetch_add(size, Ordering::Relaxed)
        .saturating_add(size)
        < WORK
    {
        return;
    }
    // SAFETY: both read the runtime's state only: no lock, no allocation.
    let may_ask = unsafe { ffi::Py_IsInitialized() != 0 && PyGILState_Check() != 0 };
    if !may_ask
        || STATE
            .compare_exchange(ARMED, ASKED, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    // SAFETY: this thread holds the interpreter's lock and the interpreter is not
    // finalizing, so its pending calls' lock is alive; asking takes that lock only
    // (CPython allocates nothing while it holds it) and allocates nothing.
    if unsafe { ffi::Py_AddPendingCall(Some(start_pending), std::ptr::null_mut()) } != 0 {
        // The queue is full: the next block taken asks again.
        let _ = STATE.compare_exchange(ASKED, ARMED, Ordering::SeqCst, Ordering::Relaxed);
    }
}

/// The pending call: made by the interpreter's main thread between two bytecodes, with
/// its lock. Always 0: there is no Python error to raise, and nothing unwinds out of it.
extern "C" fn start_pending(_: *mut c_void) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        // A child that was armed again after the call was asked (it was copied into the
        // child's queue) counts anew; hooks stopped since have nothing to give back.
        if STATE
            .compare_exchange(ASKED, STARTED, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
            && route::taking()
        {
            let _ = arenapool_alloc::idle_return();
        }
    });
    0
}
