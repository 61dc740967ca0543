//! The hook on CPython's raw allocator domain (`PyMem_SetAllocator`): blocks from the
//! threshold up go to arenapool, the rest and every block that is not arenapool's to
//! the allocator that was there before (the system `malloc`, `PYTHONMALLOC=debug`'s
//! checks, `tracemalloc`, another hook).
//!
//! CPython's object and memory domains (pymalloc) ask the raw domain for every block
//! above 512 bytes, so the hook sees the large blocks of `bytes`, `bytearray`, lists,
//! pickle's buffers and arrays made through `PyMem_*`, on any thread, with or without
//! the interpreter's lock.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

use pyo3::prelude::*;

use crate::route;
use crate::wrapped::{Allocator, RawFree};

/// CPython's `PyMemAllocatorEx` (`Include/cpython/pymem.h`), unchanged since 3.5.
type PyMemAllocatorEx = Allocator<RawFree>;

/// `PYMEM_DOMAIN_RAW`.
const DOMAIN_RAW: c_int = 0;

// CPython's allocator API: not part of the limited API, but exported by every CPython
// from 3.5 on, with this signature.
extern "C" {
    fn PyMem_GetAllocator(domain: c_int, allocator: *mut PyMemAllocatorEx);
    fn PyMem_SetAllocator(domain: c_int, allocator: *mut PyMemAllocatorEx);
}

/// The allocator the hook wraps: set before the hook is installed, never freed (a
/// thread may still be inside the hook after it has left the chain).
static PREVIOUS: AtomicPtr<PyMemAllocatorEx> = AtomicPtr::new(ptr::null_mut());

fn previous() -> &'static PyMemAllocatorEx {
    // SAFETY: `PREVIOUS` is set (to a leaked, never-freed allocator) before the hook
    // is installed, and the hook's functions are the only callers.
    unsafe { &*PREVIOUS.load(Ordering::Acquire) }
}

/// Blocks the hook made that are not yet freed: while any is alive, the hook must stay
/// in the chain to free it. Counted by `route`'s `take`, `free` and `realloc`.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether the hook may leave the chain: it takes no block and none of its blocks is
/// alive.
fn none_alive() -> bool {
    !route::taking() && LIVE.load(Ordering::SeqCst) == 0
}

unsafe extern "C" fn hook_malloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    if let Some(block) = route::take(size, false, Some(&LIVE)) {
        return block;
    }
    // SAFETY: the wrapped allocator, live for the process's life.
    unsafe { previous().malloc(size) }
}

unsafe extern "C" fn hook_calloc(_ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    if let Some(size) = nelem.checked_mul(elsize) {
        if let Some(block) = route::take(size, true, Some(&LIVE)) {
            return block;
        }
    }
    // SAFETY: the wrapped allocator, live for the process's life.
    unsafe { previous().calloc(nelem, elsize) }
}

unsafe extern "C" fn hook_realloc(
    _ctx: *mut c_void,
    block: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: CPython's contract for `realloc`; the hook's blocks are counted in `LIVE`,
    // as by its other functions.
    unsafe { route::realloc(previous(), block, size, Some(&LIVE)) }
}

unsafe extern "C" fn hook_free(_ctx: *mut c_void, block: *mut c_void) {
    // SAFETY: CPython's contract: a live block of this domain's, not used again; the
    // hook's blocks are counted in `LIVE`.
    if unsafe { route::free(block, Some(&LIVE)) } {
        return;
    }
    // SAFETY: not ours, so the wrapped allocator's.
    unsafe { previous().free(block, 0) }
}

/// The domain's allocator now.
fn current() -> PyMemAllocatorEx {
    let mut now = PyMemAllocatorEx {
        ctx: ptr::null_mut(),
        malloc: None,
        calloc: None,
        realloc: None,
        free: None,
    };
    // SAFETY: a valid struct to fill; the caller holds the interpreter's lock.
    unsafe { PyMem_GetAllocator(DOMAIN_RAW, &mut now) };
    now
}

/// The hook as installed. The domain's table is compared with this copy, not with the
/// functions' names: a function's address may differ from one mention to another.
static HOOK: OnceLock<Hook> = OnceLock::new();

/// The hook's functions (Send: plain function pointers).
#[derive(Debug, Clone, Copy)]
struct Hook {
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void),
}

fn hook() -> &'static Hook {
    HOOK.get_or_init(|| Hook {
        malloc: hook_malloc,
        calloc: hook_calloc,
        realloc: hook_realloc,
        free: hook_free,
    })
}

fn is_hook(allocator: &PyMemAllocatorEx) -> bool {
    allocator.malloc.map(|f| f as usize) == Some(hook().malloc as usize)
}

/// Where the hook is: `"top"` (the domain's allocator), `"wrapped"` (in the chain
/// under another hook installed later), or `"absent"`.
fn where_is_hook() -> &'static str {
    if is_hook(&current()) {
        "top"
    } else if IN_CHAIN.load(Ordering::Relaxed) {
        "wrapped"
    } else {
        "absent"
    }
}

/// Whether the hook is in the domain's chain (at the top or under later hooks).
static IN_CHAIN: AtomicBool = AtomicBool::new(false);

/// Installs the hook (if it is not in the chain already) and starts taking blocks.
/// Returns whether the hook was newly put in the chain.
#[pyfunction]
pub(crate) fn install_raw(_py: Python<'_>) -> bool {
    route::start();
    // The idle return's thread starts outside the allocator, so here: from then on the
    // hooks' large blocks tell it the process works, and it gives back what a process
    // that went idle holds (a worker between jobs, a kernel between cells).
    let _ = arenapool_alloc::idle_return();
    if IN_CHAIN.load(Ordering::Relaxed) {
        return false;
    }
    let prev = current();
    PREVIOUS.store(Box::into_raw(Box::new(prev)), Ordering::Release);
    // The hook ignores its context; it is given the previous allocator's, so that a
    // thread that reads the domain's table while it is being written, and sees the
    // previous allocator's function with the hook's context, still calls it right.
    let functions = hook();
    let mut hook = PyMemAllocatorEx {
        ctx: prev.ctx,
        malloc: Some(functions.malloc),
        calloc: Some(functions.calloc),
        realloc: Some(functions.realloc),
        free: Some(functions.free),
    };
    // SAFETY: a valid allocator whose functions wrap the previous one; the caller holds
    // the interpreter's lock.
    unsafe { PyMem_SetAllocator(DOMAIN_RAW, &mut hook) };
    IN_CHAIN.store(true, Ordering::Relaxed);
    true
}

/// Stops taking blocks, and takes the hook out of the chain if that can be done
/// safely: it is at the top (no hook installed after it wraps it) and no block of
/// arenapool's is alive (they must be freed by the hook). Returns where the hook is
/// afterwards (see `raw_state`).
#[pyfunction]
pub(crate) fn uninstall_raw(_py: Python<'_>) -> &'static str {
    route::stop();
    if IN_CHAIN.load(Ordering::Relaxed) && is_hook(&current()) && none_alive() {
        let mut prev = *previous();
        // SAFETY: the allocator the hook wrapped, still valid (the chain under the hook
        // is unchanged: only a hook installed later could change it, and there is none);
        // the caller holds the interpreter's lock.
        unsafe { PyMem_SetAllocator(DOMAIN_RAW, &mut prev) };
        IN_CHAIN.store(false, Ordering::Relaxed);
    }
    where_is_hook()
}

/// Where the raw domain's hook is: `"top"`, `"wrapped"` or `"absent"`.
#[pyfunction]
pub(crate) fn raw_state(_py: Python<'_>) -> &'static str {
    where_is_hook()
}

/// How many blocks the raw domain's hook made are still alive.
#[pyfunction]
pub(crate) fn raw_live_blocks() -> usize {
    LIVE.load(Ordering::SeqCst)
}
