//! The blocks CPython's arena allocator hands out at the size of pymalloc's arenas,
//! recorded by a wrapper of that allocator (`PyObject_SetArenaAllocator`).
//!
//! pymalloc is not the allocator's only caller: since CPython 3.11 the frames' data
//! stack takes its chunks from it too (a frame of about 70,000 locals gets 1 MiB), and
//! any extension may call it. So a block listed here is only a candidate: its headers
//! are checked ([`super::header`]) and it is counted against pymalloc's own count of
//! the arenas it made ([`super::give_back`]) before anything is written to it. A block
//! whose headers fail is unlisted for good and counted as not pymalloc's, when a look
//! finds it or when it is freed.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use super::header::{self, Geometry, Pool, MAX_POOLS};

/// CPython's `PyObjectArenaAllocator`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArenaAllocator {
    ctx: *mut c_void,
    alloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize)>,
}

// CPython's API, exported by every CPython from 3.4 (the arena allocator) and 3.8 (the
// main interpreter) on; not part of the limited API.
extern "C" {
    fn PyObject_GetArenaAllocator(allocator: *mut ArenaAllocator);
    fn PyObject_SetArenaAllocator(allocator: *mut ArenaAllocator);
    fn PyInterpreterState_Head() -> *mut c_void;
    fn PyInterpreterState_Main() -> *mut c_void;
}

/// The arena allocator the wrapper calls: set before the wrapper is installed, never
/// freed.
static PREVIOUS: AtomicPtr<ArenaAllocator> = AtomicPtr::new(ptr::null_mut());
/// The geometry the wrapper records blocks by; set before the wrapper is installed.
static GEOMETRY: AtomicPtr<Geometry> = AtomicPtr::new(ptr::null_mut());

/// The blocks of an arena's size the allocator has handed out since the wrapper was
/// installed and not taken back, unless found not to be pymalloc's; up to `CAPACITY` of
/// them (64 GiB of 1 MiB arenas). `LEN` of `TABLE` are in use. Changed only under
/// `TABLE_LOCK`, in an order that keeps every listed block mapped at every instant: a
/// block is listed after it is mapped and unlisted before it is unmapped. A child made
/// by `fork` from a thread that did not hold the lock may inherit it held: the child
/// frees it (`after_fork_in_child`), and the table is sound as it stands.
const CAPACITY: usize = 65_536;
static TABLE: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
static LEN: AtomicUsize = AtomicUsize::new(0);
static TABLE_LOCK: AtomicBool = AtomicBool::new(false);
/// Blocks of an arena's size the allocator has handed out since the wrapper was
/// installed, pymalloc's and others'.
static MADE: AtomicUsize = AtomicUsize::new(0);
/// Of those, the ones found not to be pymalloc's.
static NOT_PYMALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Whether a block was handed out while an interpreter other than the main one existed.
static OTHER_INTERPRETER: AtomicBool = AtomicBool::new(false);

/// The table, locked.
pub(crate) struct Table(());

impl Table {
    pub(crate) fn lock() -> Self {
        while TABLE_LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        Table(())
    }

    fn list(&mut self, block: usize) {
        let len = LEN.load(Ordering::Relaxed);
        if len < CAPACITY {
            TABLE[len].store(block, Ordering::Relaxed);
            LEN.store(len + 1, Ordering::Release);
        }
    }

    /// Unlists the block at `at`: the last entry moves into its place before the table
    /// shrinks (in between it is listed twice, never a block that is gone).
    fn unlist_at(&mut self, at: usize) {
        let len = LEN.load(Ordering::Relaxed);
        TABLE[at].store(TABLE[len - 1].load(Ordering::Relaxed), Ordering::Relaxed);
        LEN.store(len - 1, Ordering::Release);
    }

    fn position(&self, block: usize) -> Option<usize> {
        // The arenas made last are usually the first unmapped.
        (0..LEN.load(Ordering::Relaxed))
            .rev()
            .find(|&i| TABLE[i].load(Ordering::Relaxed) == block)
    }

    /// Calls `keep` on every listed block, and unlists those it returns `false` for,
    /// counting them as not pymalloc's.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        let mut at = 0;
        while at < LEN.load(Ordering::Relaxed) {
            if keep(TABLE[at].load(Ordering::Relaxed)) {
                at += 1;
            } else {
                self.unlist_at(at);
                NOT_PYMALLOCS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        TABLE_LOCK.store(false, Ordering::Release);
    }
}

/// Blocks of an arena's size handed out since the wrapper was installed, and how many
/// of them were found not to be pymalloc's.
pub(crate) fn counts() -> (usize, usize) {
    (
        MADE.load(Ordering::Relaxed),
        NOT_PYMALLOCS.load(Ordering::Relaxed),
    )
}

/// Whether an interpreter other than the main one exists now, or existed when the
/// allocator handed out a block.
pub(crate) fn other_interpreter() -> bool {
    OTHER_INTERPRETER.load(Ordering::Relaxed) || !only_main_interpreter()
}

/// Whether the main interpreter is the only one: the newest interpreter, which heads
/// CPython's list, is the main one. Reads two pointers, follows none.
fn only_main_interpreter() -> bool {
    // SAFETY: both read a pointer of the runtime's, with no precondition.
    unsafe { PyInterpreterState_Head() == PyInterpreterState_Main() }
}

fn wrapped() -> &'static ArenaAllocator {
    // SAFETY: `PREVIOUS` is set (to a leaked, never-freed allocator) before the wrapper
    // is installed, and the wrapper's functions are its only readers.
    unsafe { &*PREVIOUS.load(Ordering::Acquire) }
}

/// The geometry blocks are recorded by, once the wrapper is installed.
pub(crate) fn geometry() -> Option<&'static Geometry> {
    // SAFETY: null, or set to a leaked, never-freed geometry before the wrapper was
    // installed.
    unsafe { GEOMETRY.load(Ordering::Acquire).as_ref() }
}

unsafe extern "C" fn arena_alloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    let wrapped = wrapped();
    let block = match wrapped.alloc {
        // SAFETY: the wrapped allocator, called as its caller called this one.
        Some(alloc) => unsafe { alloc(wrapped.ctx, size) },
        None => ptr::null_mut(),
    };
    if !block.is_null() && geometry().is_some_and(|g| size == g.arena) {
        if !only_main_interpreter() {
            OTHER_INTERPRETER.store(true, Ordering::Relaxed);
        }
        MADE.fetch_add(1, Ordering::Relaxed);
        Table::lock().list(block as usize);
    }
    block
}

unsafe extern "C" fn arena_free(_ctx: *mut c_void, block: *mut c_void, size: usize) {
    {
        let mut table = Table::lock();
        if let Some(at) = table.position(block as usize) {
            // pymalloc frees an arena once every pool in it is free, its headers as it
            // left them: a block whose headers fail was not one of its arenas.
            let mut pools = [Pool::Uncarved; MAX_POOLS];
            if !geometry()
                // SAFETY: a listed block, mapped until the free below; the caller
                // holds the interpreter's lock.
                .is_some_and(|g| unsafe { header::check_arena(g, block as usize, &mut pools) })
            {
                NOT_PYMALLOCS.fetch_add(1, Ordering::Relaxed);
            }
            table.unlist_at(at);
        }
    }
    let wrapped = wrapped();
    if let Some(free) = wrapped.free {
        // SAFETY: a block the wrapped allocator made, taken back as its caller asks.
        unsafe { free(wrapped.ctx, block, size) };
    }
}

extern "C" fn after_fork_in_child() {
    TABLE_LOCK.store(false, Ordering::Release);
}

fn arena_allocator() -> ArenaAllocator {
    let mut now = ArenaAllocator {
        ctx: ptr::null_mut(),
        alloc: None,
        free: None,
    };
    // SAFETY: a valid struct to fill; the caller holds the interpreter's lock.
    unsafe { PyObject_GetArenaAllocator(&mut now) };
    now
}

/// The wrapper's `ctx`: an address no other allocator has (the wrapped allocator's
/// own `ctx` is kept with it).
static MARK: u8 = 0;

fn mark() -> *mut c_void {
    ptr::addr_of!(MARK).cast_mut().cast()
}

/// Whether the arena allocator in force is the wrapper: if another was set over it,
/// blocks may be handed out and taken back without it, and the table no longer says
/// which are mapped.
pub(crate) fn wrapper_in_force() -> bool {
    let now = arena_allocator();
    let alloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void = arena_alloc;
    let free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) = arena_free;
    now.ctx == mark()
        && now.alloc.is_some_and(|now| ptr::fn_addr_eq(now, alloc))
        && now.free.is_some_and(|now| ptr::fn_addr_eq(now, free))
}

/// Installs the wrapper of the arena allocator in force, recording blocks of
/// `geometry.arena` bytes. Called once per process, holding the interpreter's lock.
/// Returns whether it was installed.
pub(crate) fn install_wrapper(geometry: Geometry) -> bool {
    let now = arena_allocator();
    if now.alloc.is_none() || now.free.is_none() {
        return false;
    }
    GEOMETRY.store(Box::into_raw(Box::new(geometry)), Ordering::Release);
    PREVIOUS.store(Box::into_raw(Box::new(now)), Ordering::Release);
    // SAFETY: a handler that only stores to an atomic.
    if unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) } != 0 {
        return false;
    }
    let mut wrapper = ArenaAllocator {
        ctx: mark(),
        alloc: Some(arena_alloc),
        free: Some(arena_free),
    };
    // SAFETY: a valid allocator whose functions wrap the one in force; the caller
    // holds the interpreter's lock, under which pymalloc makes and frees arenas.
    unsafe { PyObject_SetArenaAllocator(&mut wrapper) };
    true
}
