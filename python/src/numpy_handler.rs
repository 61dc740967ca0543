//! numpy's data memory handler (NEP 49, numpy 1.22 on): arrays' data blocks from the
//! threshold up go to arenapool, the rest to the handler that was in force before.
//!
//! numpy's handler is a context variable whose default, in every context that has not
//! set one (every new thread's, the threads that unpickle a pool's results), is one
//! capsule, numpy's default handler. Arenapool wraps the handler *inside* that capsule,
//! so every such context gets it; a context that set a handler of its own gets a
//! wrapper of that one from `install_numpy`. Each array keeps the capsule of the
//! handler that made its data and frees through it, and the wrappers send every block
//! that is not arenapool's to the handler they wrap, so arrays made before or after,
//! or in other threads, are always freed right. For the same reason a wrapper, once
//! in place, is never taken out of the default capsule: it only stops taking blocks.
//!
//! numpy's own handler advises the kernel to back each array of 4 MiB or more with huge
//! pages (`madvise(MADV_HUGEPAGE)`, unless `numpy._core.multiarray._set_madvise_hugepage`
//! turned it off); arenapool's does the same for the blocks it takes. Without it, work
//! that reads a large array at random missed the processor's address translations at
//! every 4 KiB page: a scikit-learn forest's tree builder, which gathers a feature of a
//! 160 MB matrix by sample, spent 1.7 times as long in that loop (docs/python.md).

use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::PyImportError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::route;
use crate::wrapped::{self, SizedFree};

/// numpy's `PyDataMemAllocator`.
type Allocator = wrapped::Allocator<SizedFree>;

/// numpy's `PyDataMem_Handler`, version 1.
#[repr(C)]
#[derive(Debug)]
struct Handler {
    name: [c_char; 127],
    version: u8,
    allocator: Allocator,
}

/// The capsule name numpy requires of handlers.
const CAPSULE_NAME: &CStr = c"mem_handler";

/// The name numpy reports for arenapool's handler (`np.core.multiarray.get_handler_name()`).
const NAME: &[u8] = b"arenapool";

/// What one of arenapool's handlers wraps: the handler in force when it was set, kept
/// alive for the process's life (arrays may hold arenapool's handler, and through it
/// free with the previous one, for as long as they live).
#[derive(Debug)]
struct Wrapped {
    allocator: Allocator,
    /// The capsule of the wrapped handler, to put back in a context; null for the
    /// default handler, wrapped inside its own capsule.
    capsule: *mut ffi::PyObject,
}

/// The previous handler of one of arenapool's, from its context.
///
/// # Safety
///
/// `ctx` is the context of a handler made by [`wrapper`].
unsafe fn wrapped_by<'a>(ctx: *mut c_void) -> &'a Allocator {
    // SAFETY: `wrapper` sets the context to a leaked `Wrapped`.
    unsafe { &(*ctx.cast::<Wrapped>()).allocator }
}

/// The size from which numpy's own handler advises huge pages for an array's data.
const HUGE_FROM: usize = 4 << 20;

/// Whether numpy advises huge pages for large arrays (its `_get_madvise_hugepage()`),
/// read as the handler is installed.
static ADVISE_HUGE: AtomicBool = AtomicBool::new(false);

/// Advises huge pages for the whole pages of `block`, a new block of `size` bytes that
/// arenapool took, as numpy's own handler would: from [`HUGE_FROM`] bytes, if numpy's
/// setting is on. Only pages that lie inside the block are advised; the advice changes
/// no byte, and a kernel without huge pages refuses it, which changes nothing either.
fn advise_huge(block: *mut c_void, size: usize) {
    if size < HUGE_FROM || !ADVISE_HUGE.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: `sysconf` has no preconditions (glibc answers this from memory).
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let start = (block as usize).next_multiple_of(page);
    let end = (block as usize + size) & !(page - 1);
    if end > start {
        // SAFETY: `[start, end)` is whole pages of a live block of arenapool's, just
        // made; `MADV_HUGEPAGE` neither reads nor writes them.
        unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// Reads numpy's huge page setting into [`ADVISE_HUGE`]; off if numpy has none.
fn read_numpy_huge_setting(py: Python<'_>) {
    let on = py
        .import("numpy._core.multiarray")
        .or_else(|_| py.import("numpy.core.multiarray"))
        .and_then(|m| {
            m.getattr("_get_madvise_hugepage")?
                .call0()?
                .extract::<bool>()
        })
        .unwrap_or(false);
    ADVISE_HUGE.store(on, Ordering::Relaxed);
}

unsafe extern "C" fn handler_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    if let Some(block) = route::take(size, false, None) {
        advise_huge(block, size);
        return block;
    }
    // SAFETY: the context of one of our handlers, whose wrapped handler lives for the
    // process's life.
    unsafe { wrapped_by(ctx).malloc(size) }
}

unsafe extern "C" fn handler_calloc(ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    if let Some(size) = nelem.checked_mul(elsize) {
        if let Some(block) = route::take(size, true, None) {
            advise_huge(block, size);
            return block;
        }
    }
    // SAFETY: the context of one of our handlers, whose wrapped handler lives for the
    // process's life.
    unsafe { wrapped_by(ctx).calloc(nelem, elsize) }
}

unsafe extern "C" fn handler_realloc(
    ctx: *mut c_void,
    block: *mut c_void,
    size: usize,
) -> *mut c_void {
    // SAFETY: numpy's contract for `realloc`, on a handler of ours (its context); the
    // handlers stay in place for good, so they count no blocks.
    unsafe { route::realloc(wrapped_by(ctx), block, size, None) }
}

unsafe extern "C" fn handler_free(ctx: *mut c_void, block: *mut c_void, size: usize) {
    // SAFETY: numpy's contract: a live block of this handler's, not used again; the
    // handlers count no blocks.
    if unsafe { route::free(block, None) } {
        return;
    }
    // SAFETY: the context of one of our handlers; not ours, so the wrapped handler's.
    unsafe { wrapped_by(ctx).free(block, size) }
}

/// numpy's C API table (`_ARRAY_API`), from numpy 2's module or numpy 1's.
fn api_table(py: Python<'_>) -> PyResult<*const *const c_void> {
    let module = py
        .import("numpy._core._multiarray_umath")
        .or_else(|_| py.import("numpy.core._multiarray_umath"))
        .map_err(|e| PyImportError::new_err(format!("numpy's C API cannot be loaded: {e}")))?;
    let capsule = module.getattr("_ARRAY_API")?;
    // SAFETY: a live object (held by `capsule`); the capsule's own name is the one to
    // read its pointer with. Both calls set an exception on failure.
    let table = unsafe {
        let name = ffi::PyCapsule_GetName(capsule.as_ptr());
        ffi::PyCapsule_GetPointer(capsule.as_ptr(), name)
    };
    if table.is_null() {
        return Err(PyErr::take(py)
            .unwrap_or_else(|| PyImportError::new_err("numpy's C API table is missing")));
    }
    Ok(table.cast())
}

/// Slots of the C API table (numpy's `numpy_api.py`), from numpy 1.22 on: two
/// functions, and the address of the default handler's capsule.
const SET_HANDLER: usize = 304;
const GET_HANDLER: usize = 305;
const DEFAULT_HANDLER: usize = 306;

type SetHandler = unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject;
type GetHandler = unsafe extern "C" fn() -> *mut ffi::PyObject;

/// numpy's handler functions, and its default handler's capsule.
struct Api {
    set: SetHandler,
    get: GetHandler,
    default: *mut ffi::PyObject,
}

fn api(py: Python<'_>) -> PyResult<Api> {
    let table = api_table(py)?;
    // SAFETY: numpy 1.22 and later have these slots (the caller checked the version),
    // holding functions of these signatures; the table lives as long as numpy.
    unsafe {
        let set = *table.add(SET_HANDLER);
        let get = *table.add(GET_HANDLER);
        let default = *table.add(DEFAULT_HANDLER);
        if set.is_null() || get.is_null() || default.is_null() {
            return Err(PyImportError::new_err(
                "this numpy has no memory handler API (numpy 1.22 or later is needed)",
            ));
        }
        let default = *default.cast::<*mut ffi::PyObject>();
        if default.is_null() {
            return Err(PyImportError::new_err(
                "numpy's default memory handler is not set up",
            ));
        }
        Ok(Api {
            set: std::mem::transmute::<*const c_void, SetHandler>(set),
            get: std::mem::transmute::<*const c_void, GetHandler>(get),
            default,
        })
    }
}

/// The handler capsule in force in the current context (a new reference).
fn current<'py>(py: Python<'py>, api: &Api) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: numpy's function; the interpreter's lock is held.
    let handler = unsafe { (api.get)() };
    // SAFETY: a new reference, or null with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, handler) }
}

/// The handler struct inside a handler capsule.
fn handler_of(capsule: &Bound<'_, PyAny>) -> PyResult<*const Handler> {
    // SAFETY: a live object; an exception is set if it is not a handler capsule.
    let handler = unsafe { ffi::PyCapsule_GetPointer(capsule.as_ptr(), CAPSULE_NAME.as_ptr()) };
    if handler.is_null() {
        return Err(PyErr::take(capsule.py()).unwrap_or_else(|| {
            PyImportError::new_err("numpy's memory handler is not a handler capsule")
        }));
    }
    Ok(handler.cast())
}

/// Our handlers' functions, as written into every handler of ours. Handlers are
/// compared with this copy, not with the functions' names: a function's address may
/// differ from one mention to another.
static FUNCTIONS: OnceLock<Functions> = OnceLock::new();

#[derive(Debug, Clone, Copy)]
struct Functions {
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize),
}

fn functions() -> Functions {
    *FUNCTIONS.get_or_init(|| Functions {
        malloc: handler_malloc,
        calloc: handler_calloc,
        realloc: handler_realloc,
        free: handler_free,
    })
}

fn is_ours(handler: *const Handler) -> bool {
    // SAFETY: a handler numpy holds, alive while its capsule is.
    let malloc = unsafe { (*handler).allocator.malloc };
    malloc.map(|f| f as usize) == Some(functions().malloc as usize)
}

/// A handler of arenapool's wrapping `prev`, kept, with what it wraps, for the
/// process's life; `capsule` is the capsule to put back in a context (null: none).
fn wrapper(prev: *const Handler, capsule: *mut ffi::PyObject) -> PyResult<&'static mut Handler> {
    // SAFETY: a live handler (its capsule is held).
    if unsafe { (*prev).version } != 1 {
        return Err(PyImportError::new_err(
            "numpy's memory handler has a version arenapool does not know (1 is known)",
        ));
    }
    let wrapped = Box::leak(Box::new(Wrapped {
        // SAFETY: as above.
        allocator: unsafe { (*prev).allocator },
        capsule,
    }));
    let ours = functions();
    let mut name = [0 as c_char; 127];
    for (to, from) in name.iter_mut().zip(NAME) {
        *to = *from as c_char;
    }
    Ok(Box::leak(Box::new(Handler {
        name,
        version: 1,
        allocator: Allocator {
            ctx: (wrapped as *mut Wrapped).cast(),
            malloc: Some(ours.malloc),
            calloc: Some(ours.calloc),
            realloc: Some(ours.realloc),
            free: Some(ours.free),
        },
    })))
}

/// A handler capsule of arenapool's wrapping the handler of capsule `prev`.
fn make_handler<'py>(prev: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // Kept for the process's life: arrays that hold our handler free through it.
    let handler = wrapper(handler_of(prev)?, prev.clone().into_ptr())?;
    // SAFETY: a handler that lives for the process's life, under numpy's capsule name;
    // no destructor (it is never freed).
    let capsule = unsafe {
        ffi::PyCapsule_New(
            (handler as *mut Handler).cast(),
            CAPSULE_NAME.as_ptr(),
            None,
        )
    };
    // SAFETY: a new reference, or null with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(prev.py(), capsule) }
}

/// Wraps numpy's default handler inside its own capsule, for every context that has
/// not set a handler of its own; does nothing if it is wrapped already. Returns
/// whether it was wrapped now.
#[pyfunction]
pub(crate) fn install_numpy_default(py: Python<'_>) -> PyResult<bool> {
    let api = api(py)?;
    read_numpy_huge_setting(py);
    // SAFETY: numpy's default capsule lives as long as numpy (it is a global of
    // numpy's, never freed); borrowed for this call, with the lock held.
    let default = unsafe { Bound::from_borrowed_ptr(py, api.default) };
    let handler = handler_of(&default)?;
    if is_ours(handler) {
        return Ok(false);
    }
    let ours = wrapper(handler, ptr::null_mut())?;
    // SAFETY: a live capsule named "mem_handler", given a handler that lives for the
    // process's life. numpy reads the capsule's pointer at each allocation and free,
    // which a thread may do without the lock: an aligned pointer is written whole, so
    // it reads either handler, and both handle every block of the other's.
    let set = unsafe { ffi::PyCapsule_SetPointer(api.default, (ours as *mut Handler).cast()) };
    if set != 0 {
        return Err(PyErr::take(py).unwrap_or_else(|| {
            PyImportError::new_err("numpy's default handler cannot be wrapped")
        }));
    }
    Ok(true)
}

/// Sets `capsule` (a live handler capsule) as the current context's handler.
fn set_handler(py: Python<'_>, api: &Api, capsule: *mut ffi::PyObject) -> PyResult<()> {
    // SAFETY: numpy's function, with a live handler capsule; the lock is held.
    let old = unsafe { (api.set)(capsule) };
    // SAFETY: the old handler (a new reference), or null with an exception set.
    drop(unsafe { Bound::from_owned_ptr_or_err(py, old) }?);
    Ok(())
}

/// Sets arenapool's handler for the current context, wrapping the one in force; does
/// nothing if it is arenapool's already. Returns whether it was set.
#[pyfunction]
pub(crate) fn install_numpy(py: Python<'_>) -> PyResult<bool> {
    let api = api(py)?;
    read_numpy_huge_setting(py);
    let prev = current(py, &api)?;
    if is_ours(handler_of(&prev)?) {
        return Ok(false);
    }
    let ours = make_handler(&prev)?;
    set_handler(py, &api, ours.as_ptr())?;
    Ok(true)
}

/// Puts back, in the current context, the handler arenapool's wrapped; does nothing if
/// arenapool's is not in force here. Returns whether it was put back. Arrays made
/// meanwhile keep arenapool's handler, which frees their data right.
#[pyfunction]
pub(crate) fn uninstall_numpy(py: Python<'_>) -> PyResult<bool> {
    let api = api(py)?;
    let now = current(py, &api)?;
    let handler = handler_of(&now)?;
    if !is_ours(handler) {
        return Ok(false);
    }
    // SAFETY: ours, so its context is a `Wrapped`, which holds the previous capsule.
    let prev = unsafe { (*(*handler).allocator.ctx.cast::<Wrapped>()).capsule };
    if prev.is_null() {
        // numpy's default handler, wrapped in place: it stays, and takes no block
        // once the hooks stop.
        return Ok(false);
    }
    set_handler(py, &api, prev)?;
    Ok(true)
}

/// Whether arenapool's handler is in force in the current context.
#[pyfunction]
pub(crate) fn numpy_installed(py: Python<'_>) -> PyResult<bool> {
    let api = api(py)?;
    let now = current(py, &api)?;
    Ok(is_ours(handler_of(&now)?))
}
