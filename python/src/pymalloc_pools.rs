//! pymalloc's free pools given back to the OS.
//!
//! CPython's allocator of small objects, pymalloc, carves arenas of 1 MiB into pools of
//! 16 KiB, each for one size of block, and unmaps an arena only once every pool in it
//! is free: a few objects that live on keep their whole arena, and the free pools
//! around them stay resident. This module records the arenas pymalloc maps (a wrapper
//! of its arena allocator, `PyObject_SetArenaAllocator`) and, when asked, gives back
//! the pages of each free pool but its first, which holds the pool's header: pymalloc
//! keeps its list of free pools there.
//!
//! It relies on CPython's `struct pool_header` (`pycore_obmalloc.h`), the same from
//! 3.10 to 3.14 in 64-bit builds: the count of blocks in use at offset 0, the index of
//! the size of its blocks at 36 (`szidx`), the largest offset of a block at 44, set
//! when pymalloc first carves the pool. A free pool given back gets the index of no
//! size (`DUMMY_SIZE_IDX`): pymalloc then sets the pool up anew when it takes it again,
//! instead of following a list of free blocks through the pages given back. On other
//! versions, with arenas of another size (a build without pymalloc's radix tree), with
//! pages of 16 KiB or more, or while another interpreter than the main one exists,
//! nothing is given back.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Once;

use pyo3::prelude::*;

/// pymalloc's arena size and pool size where this module works (`ARENA_BITS` 20,
/// `POOL_BITS` 14).
const ARENA_SIZE: usize = 1 << 20;
const POOL_SIZE: usize = 1 << 14;
/// Offsets in `struct pool_header` (64-bit builds).
const COUNT_AT: usize = 0;
const SIZE_INDEX_AT: usize = 36;
const MAX_NEXT_OFFSET_AT: usize = 44;
/// `DUMMY_SIZE_IDX`: the size index of a pool pymalloc must set up before use.
const NO_SIZE_INDEX: u32 = 0xffff;

/// CPython's `PyObjectArenaAllocator`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ArenaAllocator {
    ctx: *mut c_void,
    alloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize)>,
}

// CPython's API, exported by every CPython from 3.4 (the arena allocator) and 3.0 (the
// list of interpreters) on; not part of the limited API.
extern "C" {
    fn PyObject_GetArenaAllocator(allocator: *mut ArenaAllocator);
    fn PyObject_SetArenaAllocator(allocator: *mut ArenaAllocator);
    fn PyInterpreterState_Head() -> *mut c_void;
    fn PyInterpreterState_Next(interpreter: *mut c_void) -> *mut c_void;
}

/// The arena allocator the wrapper calls: set before the wrapper is installed, never
/// freed.
static PREVIOUS: AtomicPtr<ArenaAllocator> = AtomicPtr::new(ptr::null_mut());

/// The arenas pymalloc has mapped since the wrapper was installed and not unmapped,
/// up to `CAPACITY` of them (64 GiB); `LEN` of `TABLE` are in use. Changed only under
/// `TABLE_LOCK`, in an order that keeps every listed arena mapped at every instant: an
/// arena is listed after it is mapped and unlisted before it is unmapped. A child made
/// by `fork` from a thread that did not hold the lock may inherit it held: the child
/// frees it (`after_fork_in_child`), and the table is sound as it stands.
const CAPACITY: usize = 65_536;
static TABLE: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
static LEN: AtomicUsize = AtomicUsize::new(0);
static TABLE_LOCK: AtomicBool = AtomicBool::new(false);
/// Arenas pymalloc has mapped since the wrapper was installed.
static MADE: AtomicUsize = AtomicUsize::new(0);

/// Whether free pools may be given back: set by `install` on the versions above.
static ENABLED: AtomicBool = AtomicBool::new(false);

struct TableGuard;

impl TableGuard {
    fn lock() -> Self {
        while TABLE_LOCK
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        TableGuard
    }
}

impl Drop for TableGuard {
    fn drop(&mut self) {
        TABLE_LOCK.store(false, Ordering::Release);
    }
}

fn list(arena: usize) {
    let _guard = TableGuard::lock();
    let len = LEN.load(Ordering::Relaxed);
    if len < CAPACITY {
        TABLE[len].store(arena, Ordering::Relaxed);
        LEN.store(len + 1, Ordering::Release);
    }
}

fn unlist(arena: usize) {
    let _guard = TableGuard::lock();
    let len = LEN.load(Ordering::Relaxed);
    // The arenas made last are usually the first unmapped.
    if let Some(at) = (0..len)
        .rev()
        .find(|&i| TABLE[i].load(Ordering::Relaxed) == arena)
    {
        // The last entry moves into the hole before the table shrinks: in between, it
        // is listed twice, never the unmapped arena.
        TABLE[at].store(TABLE[len - 1].load(Ordering::Relaxed), Ordering::Relaxed);
        LEN.store(len - 1, Ordering::Release);
    }
}

fn previous() -> &'static ArenaAllocator {
    // SAFETY: `PREVIOUS` is set (to a leaked, never-freed allocator) before the wrapper
    // is installed, and the wrapper's functions are the only callers.
    unsafe { &*PREVIOUS.load(Ordering::Acquire) }
}

unsafe extern "C" fn arena_alloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    let wrapped = previous();
    let arena = match wrapped.alloc {
        // SAFETY: the wrapped allocator, called as pymalloc calls it.
        Some(alloc) => unsafe { alloc(wrapped.ctx, size) },
        None => ptr::null_mut(),
    };
    if !arena.is_null() && size == ARENA_SIZE {
        list(arena as usize);
        MADE.fetch_add(1, Ordering::Relaxed);
    }
    arena
}

unsafe extern "C" fn arena_free(_ctx: *mut c_void, arena: *mut c_void, size: usize) {
    unlist(arena as usize);
    let wrapped = previous();
    if let Some(free) = wrapped.free {
        // SAFETY: an arena the wrapped allocator made, unmapped as pymalloc asks.
        unsafe { free(wrapped.ctx, arena, size) };
    }
}

extern "C" fn after_fork_in_child() {
    TABLE_LOCK.store(false, Ordering::Release);
}

/// Installs the wrapper of pymalloc's arena allocator (once per process) where this
/// module can give pools back: CPython 3.10 to 3.14, pages smaller than a pool.
/// Arenas mapped before it was installed are not given back from. Returns whether free
/// pools can be given back in this process.
#[pyfunction]
pub(crate) fn install_pymalloc_pools(py: Python<'_>) -> bool {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let version = py.version_info();
        if cfg!(not(target_pointer_width = "64"))
            || !((3, 10)..(3, 15)).contains(&(version.major, version.minor))
            || page_size() >= POOL_SIZE
        {
            return;
        }
        let mut now = ArenaAllocator {
            ctx: ptr::null_mut(),
            alloc: None,
            free: None,
        };
        // SAFETY: a valid struct to fill; the caller holds the interpreter's lock.
        unsafe { PyObject_GetArenaAllocator(&mut now) };
        if now.alloc.is_none() || now.free.is_none() {
            return;
        }
        PREVIOUS.store(Box::into_raw(Box::new(now)), Ordering::Release);
        // SAFETY: a handler that only stores to an atomic.
        if unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) } != 0 {
            return;
        }
        let mut wrapper = ArenaAllocator {
            ctx: now.ctx,
            alloc: Some(arena_alloc),
            free: Some(arena_free),
        };
        // SAFETY: a valid allocator whose functions wrap the previous one; the caller
        // holds the interpreter's lock, under which pymalloc maps and unmaps arenas.
        unsafe { PyObject_SetArenaAllocator(&mut wrapper) };
        ENABLED.store(true, Ordering::Release);
    });
    ENABLED.load(Ordering::Acquire)
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(POOL_SIZE)
}

/// Whether the main interpreter is the only one: other interpreters may have
/// pymalloc state of their own, used under their own lock.
fn only_main_interpreter() -> bool {
    // SAFETY: reads the list of interpreters; the caller holds the main interpreter's
    // lock, which whoever makes an interpreter holds too.
    unsafe {
        let head = PyInterpreterState_Head();
        !head.is_null() && PyInterpreterState_Next(head).is_null()
    }
}

/// What one look at the recorded arenas found or did, in bytes of free pools' pages,
/// headers aside.
#[derive(Debug, Default, Clone, Copy)]
struct Pools {
    /// Resident when the look began.
    resident_before: usize,
    /// Resident when it ended (the same unless it gave back).
    resident_after: usize,
    /// Not resident when it ended: given back, by this look or an earlier one, or never
    /// touched.
    not_resident: usize,
}

/// Looks at every free pool of the recorded arenas; gives back the resident pages of
/// each if `give_back`.
fn look(give_back: bool) -> Pools {
    let mut pools = Pools::default();
    if !ENABLED.load(Ordering::Acquire) || !only_main_interpreter() {
        return pools;
    }
    let page = page_size();
    let per_pool = POOL_SIZE / page;
    let _guard = TableGuard::lock();
    let len = LEN.load(Ordering::Acquire);
    let mut resident = [0u8; ARENA_SIZE / 4096 + 1];
    for slot in &TABLE[..len] {
        let arena = slot.load(Ordering::Relaxed);
        let first = arena.next_multiple_of(POOL_SIZE);
        let pools_in_arena = (arena + ARENA_SIZE - first) / POOL_SIZE;
        let pages = pools_in_arena * per_pool;
        // SAFETY: `first` is page-aligned and its `pages` pages lie in a mapped arena
        // (listed, so mapped); `resident` has a byte for each.
        if unsafe { libc::mincore(first as *mut c_void, pages * page, resident.as_mut_ptr()) } != 0
        {
            continue;
        }
        for pool in 0..pools_in_arena {
            let flags = &resident[pool * per_pool..(pool + 1) * per_pool];
            if flags[0] & 1 == 0 {
                continue; // never carved, or a header pymalloc has not touched since
            }
            let header = (first + pool * POOL_SIZE) as *mut u8;
            // SAFETY: the header of a pool in a mapped arena, read and written under
            // the main interpreter's lock, under which pymalloc changes it; the only
            // interpreter is the main one.
            let (count, carved) = unsafe {
                (
                    ptr::read_volatile(header.add(COUNT_AT).cast::<u32>()),
                    ptr::read_volatile(header.add(MAX_NEXT_OFFSET_AT).cast::<u32>()) != 0,
                )
            };
            if count != 0 || !carved {
                continue;
            }
            let kept = flags[1..].iter().filter(|&&flag| flag & 1 != 0).count() * page;
            let whole = (per_pool - 1) * page;
            pools.resident_before += kept;
            if kept == 0 || !give_back {
                pools.resident_after += kept;
                pools.not_resident += whole - kept;
                continue;
            }
            // SAFETY: as above; the pool has no block in use, and with no size index
            // pymalloc sets it up anew before handing out a block of it. The pages
            // after the header hold nothing pymalloc reads again.
            let done = unsafe {
                ptr::write_volatile(header.add(SIZE_INDEX_AT).cast::<u32>(), NO_SIZE_INDEX);
                libc::madvise(
                    header.add(page).cast::<c_void>(),
                    POOL_SIZE - page,
                    libc::MADV_DONTNEED,
                )
            };
            if done == 0 {
                pools.not_resident += whole;
            } else {
                pools.resident_after += kept;
                pools.not_resident += whole - kept;
            }
        }
    }
    pools
}

/// Gives back the pages of pymalloc's free pools (see the module's docs). Returns the
/// bytes of free pools' pages (headers aside) resident before and after.
#[pyfunction]
pub(crate) fn give_back_pymalloc_pools(py: Python<'_>) -> (usize, usize) {
    let _ = py; // the interpreter's lock is held for the whole look
    let pools = look(true);
    (pools.resident_before, pools.resident_after)
}

/// The free pools of the arenas recorded: bytes of their pages (headers aside)
/// resident, and not resident (given back, or never touched).
#[pyfunction]
pub(crate) fn pymalloc_free_pools(py: Python<'_>) -> (usize, usize) {
    let _ = py;
    let pools = look(false);
    (pools.resident_after, pools.not_resident)
}

/// How many arenas pymalloc has mapped since the wrapper was installed.
#[pyfunction]
pub(crate) fn pymalloc_arenas_made() -> usize {
    MADE.load(Ordering::Relaxed)
}
