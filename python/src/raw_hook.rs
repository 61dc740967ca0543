//! The hook on CPython's raw allocator domain (`PyMem_SetAllocator`): blocks from the
//! threshold up go to arenapool, the rest and every block that is not arenapool's to
//! the allocator that was there before (the system `malloc`, `PYTHONMALLOC=debug`'s
//! checks, `tracemalloc`, another hook).
//!
//! Over a tracing `tracemalloc`, the hook goes under it, into the allocator it wraps:
//! `tracemalloc.stop()` puts that allocator back as the domain's, so the hook stays in
//! the chain, now on top, with its blocks alive (on top, it would be taken out with
//! `tracemalloc`, and its blocks freed by the system `free`). `tracemalloc` started
//! later wraps the hook as any hook, and puts it back when it stops.
//!
//! CPython's object and memory domains (pymalloc) ask the raw domain for every block
//! above 512 bytes, so the hook sees the large blocks of `bytes`, `bytearray`, lists,
//! pickle's buffers and arrays made through `PyMem_*`, on any thread, with or without
//! the interpreter's lock.

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

use pyo3::prelude::*;

use crate::errors::ArenaPoolError;
use crate::idle_start;
use crate::route;
use crate::wrapped::{Allocator, RawFree};

/// CPython's `PyMemAllocatorEx` (`Include/cpython/pymem.h`), unchanged since 3.5.
type PyMemAllocatorEx = Allocator<RawFree>;

/// `PYMEM_DOMAIN_RAW`, `PYMEM_DOMAIN_MEM`, `PYMEM_DOMAIN_OBJ`.
const DOMAIN_RAW: c_int = 0;
const DOMAIN_MEM: c_int = 1;
const DOMAIN_OBJ: c_int = 2;

// CPython's allocator API: not part of the limited API, but exported by every CPython
// from 3.5 on, with this signature.
extern "C" {
    fn PyMem_GetAllocator(domain: c_int, allocator: *mut PyMemAllocatorEx);
    fn PyMem_SetAllocator(domain: c_int, allocator: *mut PyMemAllocatorEx);
    // From 3.7 on: forgets `tracemalloc`'s trace of the block at `ptr` in `domain`, if
    // any; returns -2 when `tracemalloc` does not trace, 0 when it does.
    fn PyTraceMalloc_Untrack(domain: std::ffi::c_uint, ptr: usize) -> c_int;
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

/// `domain`'s allocator now.
fn current_of(domain: c_int) -> PyMemAllocatorEx {
    let mut now = PyMemAllocatorEx {
        ctx: ptr::null_mut(),
        malloc: None,
        calloc: None,
        realloc: None,
        free: None,
    };
    // SAFETY: a valid struct to fill; the caller holds the interpreter's lock.
    unsafe { PyMem_GetAllocator(domain, &mut now) };
    now
}

/// The raw domain's allocator now.
fn current() -> PyMemAllocatorEx {
    current_of(DOMAIN_RAW)
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

/// Where the hook goes in the chain.
enum Place {
    /// On top: the domain's allocator.
    Top,
    /// Under `tracemalloc`, in the allocator it wraps and puts back when it stops
    /// (`tracemalloc.stop()`, or at exit under `-X tracemalloc`): on top of the chain, the
    /// hook would be taken out with it while its blocks live.
    UnderTracemalloc(*mut PyMemAllocatorEx),
}

/// Where the hook must go: on top, unless `tracemalloc` traces.
///
/// `tracemalloc` keeps the three allocators it wraps side by side (`mem`, `raw`, `obj`,
/// in CPython 3.9 to 3.15 alike), in the interpreter's own memory (a static of its
/// module up to 3.11, a field of the runtime state `_PyRuntime` from 3.12 on), and
/// gives each domain's allocator the address of the one it wraps as its context: the
/// raw domain's context is then the address of the raw allocator `tracemalloc` wraps
/// and puts back. That address is used only once [`is_tracemallocs`] has found the
/// three domains' allocators to be `tracemalloc`'s; where `tracemalloc` traces under
/// another hook, or under anything that only looks like it, the check fails and the
/// hook is not installed (`tracemalloc.stop()` would take it out, or the hook would
/// be written where it does not belong).
fn place(py: Python<'_>) -> PyResult<Place> {
    if !tracemalloc_traces() {
        return Ok(Place::Top);
    }
    let (mem, raw, obj) = (current_of(DOMAIN_MEM), current(), current_of(DOMAIN_OBJ));
    let functions_shared = py.version_info() >= (3, 15);
    let runtime_state = py.version_info() >= (3, 12);
    if !is_tracemallocs([&mem, &raw, &obj], functions_shared, runtime_state) {
        return Err(ArenaPoolError::new_err(
            "tracemalloc traces, and the memory allocators in place are not the ones \
             tracemalloc sets (another hook was set over it): arenapool's hook cannot go \
             into the allocator tracemalloc wraps, where tracemalloc.stop() would leave it \
             in place, so it is not installed. Install arenapool before tracemalloc.start() \
             or that hook, or after tracemalloc.stop()",
        ));
    }
    let wrapped = raw.ctx.cast::<PyMemAllocatorEx>();
    // SAFETY: tracemalloc's allocator that the raw domain's context points to, the
    // domains' allocators found above to be tracemalloc's; read under the interpreter's
    // lock, under which tracemalloc changes it.
    let inner = unsafe { ptr::read_volatile(wrapped) };
    if inner.malloc.is_none() || inner.free.is_none() {
        return Err(ArenaPoolError::new_err(
            "tracemalloc traces, and the allocator it wraps has no functions: arenapool's \
             hook is not installed; install it after tracemalloc.stop()",
        ));
    }
    Ok(Place::UnderTracemalloc(wrapped))
}

/// Whether `tracemalloc` traces, asked without importing its module (`_tracemalloc`
/// would be imported as the interpreter starts, under `ARENAPOOL=on`).
pub(crate) fn tracemalloc_traces() -> bool {
    // SAFETY: callable from any thread, with or without the interpreter's lock. No
    // trace is ever kept for address 0 (a failed allocation is not traced), so the
    // call forgets nothing: it only answers.
    unsafe { PyTraceMalloc_Untrack(0, 0) != -2 }
}

/// Whether the memory, raw and object domains' allocators (`domains`, in that order)
/// are the ones `tracemalloc` sets while it traces, so that the raw one's context is
/// the address of the raw allocator `tracemalloc` wraps. All of it must hold; the
/// check reads the domains' tables and the loader's, never the memory the contexts
/// point to:
/// - the three contexts one allocator apart, in that order, aligned;
/// - the functions and the contexts in the interpreter's own loaded object (the one
///   that exports `PyMem_SetAllocator`), not in an extension or in memory allocated at
///   run time, and the contexts inside `_PyRuntime` where `runtime_state` (3.12 on);
/// - the memory and object domains sharing their four functions, and the raw domain
///   sharing all four with them where `functions_shared` (3.15 on: one set for the
///   three domains) or only `free` (before: a set of its own for the raw domain).
fn is_tracemallocs(
    [mem, raw, obj]: [&PyMemAllocatorEx; 3],
    functions_shared: bool,
    runtime_state: bool,
) -> bool {
    let size = std::mem::size_of::<PyMemAllocatorEx>();
    let address = |allocator: &PyMemAllocatorEx| allocator.ctx as usize;
    let functions = |allocator: &PyMemAllocatorEx| {
        [
            allocator.malloc.map(|f| f as usize),
            allocator.calloc.map(|f| f as usize),
            allocator.realloc.map(|f| f as usize),
            allocator.free.map(|f| f as usize),
        ]
    };
    let laid_out = !raw.ctx.is_null()
        && address(raw) % std::mem::align_of::<PyMemAllocatorEx>() == 0
        && address(mem).checked_add(size) == Some(address(raw))
        && address(raw).checked_add(size) == Some(address(obj));
    if !laid_out {
        return false;
    }
    let (mem_functions, raw_functions) = (functions(mem), functions(raw));
    let shared = mem_functions.iter().all(Option::is_some)
        && raw_functions.iter().all(Option::is_some)
        && mem_functions == functions(obj)
        && raw_functions[3] == mem_functions[3]
        && if functions_shared {
            raw_functions == mem_functions
        } else {
            raw_functions[..3]
                .iter()
                .zip(&mem_functions[..3])
                .all(|(raw, mem)| raw != mem)
        };
    if !shared {
        return false;
    }
    let Some((interpreter, _)) = holder_of(PyMem_SetAllocator as *const () as usize) else {
        return false;
    };
    let functions_interpreters =
        mem_functions.iter().chain(&raw_functions).flatten().all(
            |&function| matches!(holder_of(function), Some((object, _)) if object == interpreter),
        );
    let contexts_interpreters = [mem, raw, obj].iter().all(|allocator| {
        matches!(
            holder_of(address(allocator)),
            Some((object, in_runtime)) if object == interpreter && (in_runtime || !runtime_state)
        )
    });
    functions_interpreters && contexts_interpreters
}

/// The loaded object (executable or shared library) that holds `address`: its base
/// address, and whether `address` lies inside its exported `_PyRuntime` (the loader
/// names a symbol of a known size only for an address inside it); `None` where no
/// loaded object holds it (memory allocated at run time).
fn holder_of(address: usize) -> Option<(usize, bool)> {
    let mut info = libc::Dl_info {
        dli_fname: ptr::null(),
        dli_fbase: ptr::null_mut(),
        dli_sname: ptr::null(),
        dli_saddr: ptr::null_mut(),
    };
    // SAFETY: `dladdr` only reads the loader's tables (it never reads `address`) and
    // fills `info`.
    if unsafe { libc::dladdr(address as *const c_void, &mut info) } == 0 || info.dli_fbase.is_null()
    {
        return None;
    }
    // SAFETY: a symbol's name from the loader's tables, a NUL-terminated string of the
    // object, which stays loaded (it holds `address`).
    let in_runtime =
        !info.dli_sname.is_null() && unsafe { CStr::from_ptr(info.dli_sname) } == c"_PyRuntime";
    Some((info.dli_fbase as usize, in_runtime))
}

/// Installs the hook (if it is not in the chain already) and starts taking blocks.
/// Returns whether the hook was newly put in the chain. Over a tracing `tracemalloc`
/// the hook goes under it (see [`place`]); `ArenaPoolError` if it cannot go there.
///
/// `idle_return_now`: the idle return's thread starts now; otherwise once the hooks
/// have taken a few MiB of blocks (the start under `ARENAPOOL=on`: see
/// [`crate::idle_start`]).
#[pyfunction]
#[pyo3(signature = (idle_return_now = true))]
pub(crate) fn install_raw(py: Python<'_>, idle_return_now: bool) -> PyResult<bool> {
    if IN_CHAIN.load(Ordering::Relaxed) {
        start_taking(idle_return_now);
        return Ok(false);
    }
    let place = place(py)?;
    let target = match place {
        Place::Top => ptr::null_mut(),
        Place::UnderTracemalloc(wrapped) => wrapped,
    };
    let prev = if target.is_null() {
        current()
    } else {
        // SAFETY: tracemalloc's wrapped allocator, as `place` checked it.
        unsafe { ptr::read_volatile(target) }
    };
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
    if target.is_null() {
        // SAFETY: a valid allocator whose functions wrap the previous one; the caller
        // holds the interpreter's lock.
        unsafe { PyMem_SetAllocator(DOMAIN_RAW, &mut hook) };
    } else {
        // SAFETY: tracemalloc's wrapped allocator (see `place`), written under the
        // interpreter's lock as tracemalloc writes it. Its context stays; the functions
        // are written one by one, `free` first and `malloc` last, so that a thread
        // calling through it meanwhile (a free needs no lock) frees each block of the
        // hook's with the hook's `free`, which passes the others on.
        unsafe {
            ptr::write_volatile(ptr::addr_of_mut!((*target).free), hook.free);
            fence(Ordering::SeqCst);
            ptr::write_volatile(ptr::addr_of_mut!((*target).realloc), hook.realloc);
            ptr::write_volatile(ptr::addr_of_mut!((*target).calloc), hook.calloc);
            fence(Ordering::SeqCst);
            ptr::write_volatile(ptr::addr_of_mut!((*target).malloc), hook.malloc);
        }
    }
    IN_CHAIN.store(true, Ordering::Relaxed);
    start_taking(idle_return_now);
    Ok(true)
}

/// Starts taking blocks, once the hook is in the chain, and starts the idle return's
/// thread now or arms its start (see `install_raw`).
fn start_taking(idle_return_now: bool) {
    route::start();
    // The idle return's thread starts outside the allocator: here, or in the pending
    // call the hooks ask for. From then on the hooks' large blocks tell it the process
    // works, and it gives back what a process that went idle holds (a worker between
    // jobs, a kernel between cells).
    if idle_return_now {
        idle_start::now();
    } else {
        idle_start::arm();
    }
}

/// In a child made by `fork`, with the hooks taking blocks: starts the child's own
/// idle return (see `start_taking`), since the parent's thread is not in the child, or
/// arms its start again where the parent's was armed (`crate::idle_start`). A
/// pool's worker made by `fork` (`multiprocessing.Pool`'s, by default before Python
/// 3.14) never installs the hooks itself, and without it kept what its tasks freed for
/// as long as it lived. Called by the package's handler after `fork`, outside the
/// allocator; nothing if the hooks are not taking blocks.
#[pyfunction]
pub(crate) fn start_idle_return_in_child() {
    if route::taking() {
        idle_start::after_fork_in_child();
    }
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
