//! The extent hooks of every arena this crate creates: what jemalloc calls to map
//! memory for an arena and to give its pages back.
//!
//! - `alloc` maps memory itself, in whole granules of [`GRANULE`] (2 MiB) aligned to
//!   one, and marks each granule in a bitmap of the address space: [`owns`] then tells,
//!   exactly and with one load, whether an address lies in memory of this crate's
//!   arenas. Nothing else shares a granule (the tail past what jemalloc asked for stays
//!   mapped, untouched, so never resident), and nothing is ever unmapped (there is no
//!   `dalloc` hook), so a mark never goes stale.
//! - `decommit`, `purge_lazy` and `purge_forced` forward to jemalloc's own hooks and
//!   count their calls, per arena and per thread: [`crate::purge`] tells from the
//!   counts whether a purge ran.
//! - `merge` answers without jemalloc's thread state (see [`merge`]).
//!
//! Nothing here decides when pages go back: that is [`crate::purge`]'s.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_uint, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tikv_jemalloc_sys as ffi;

use crate::ctl::{self, CtlResult, ARENAS_ALL};

/// The unit in which arenas' memory is mapped and owned: 2 MiB, the x86-64 huge page.
pub(crate) const GRANULE: usize = 2 << 20;

/// Addresses [`owns`] covers: the 47-bit user address space of x86-64 and AArch64
/// Linux (mappings above it are made only when asked for with a hint above it).
const ADDRESS_BITS: u32 = 47;

const GRANULES: usize = 1 << (ADDRESS_BITS - GRANULE.trailing_zeros());

/// One bit per granule of the address space, set when an arena of this crate mapped
/// it: 8 MiB of zero-initialised static memory, of which only the words that are
/// written become resident (one 4 KiB page of it covers 64 GiB of address space).
static OWNED: [AtomicU64; GRANULES / 64] = [const { AtomicU64::new(0) }; GRANULES / 64];

/// Whether `addr` lies in memory that one of this crate's arenas mapped. Exact: no
/// other allocator's memory shares a granule with it.
#[inline]
pub(crate) fn owns(addr: usize) -> bool {
    let granule = addr >> GRANULE.trailing_zeros();
    match OWNED.get(granule / 64) {
        // Acquire: pairs with the Release of `mark`, so a block handed from the thread
        // that mapped it to this one is seen as owned.
        Some(word) => word.load(Ordering::Acquire) & (1 << (granule % 64)) != 0,
        None => false,
    }
}

/// Marks `[start, start + len)`, whole granules, as owned.
fn mark(start: usize, len: usize) {
    let first = start >> GRANULE.trailing_zeros();
    let count = len >> GRANULE.trailing_zeros();
    for granule in first..first + count {
        OWNED[granule / 64].fetch_or(1 << (granule % 64), Ordering::Release);
    }
}

thread_local! {
    /// Calls of the hooks that gave pages back (or tried to) on this thread. A plain
    /// `Cell` without destructor: readable at any point of a thread's life.
    static GAVE_BACK: Cell<u64> = const { Cell::new(0) };
}

/// Calls of the hooks that give pages back made on the calling thread, so far.
pub(crate) fn gave_back_here() -> u64 {
    GAVE_BACK.try_with(Cell::get).unwrap_or(0)
}

/// Calls of each arena's hooks that gave pages back, on any thread.
static CALLS: [AtomicU64; ARENAS_ALL as usize] = [const { AtomicU64::new(0) }; ARENAS_ALL as usize];

/// Calls of arena `index`'s hooks that gave pages back, on any thread, so far.
pub(crate) fn gave_back(index: u32) -> u64 {
    CALLS
        .get(index as usize)
        .map_or(0, |calls| calls.load(Ordering::Relaxed))
}

/// The hooks table every arena of this crate is created with.
struct Hooks {
    /// jemalloc's own hooks, which ours forward to.
    default: ffi::extent_hooks_t,
    /// Ours, whose address jemalloc keeps. Never written after it is built.
    ours: UnsafeCell<ffi::extent_hooks_t>,
}

// SAFETY: `ours` is written only while the table is built, before any other thread
// can see it; afterwards jemalloc and this module only read it.
unsafe impl Sync for Hooks {}

static HOOKS: OnceLock<CtlResult<Hooks>> = OnceLock::new();

/// The hooks table to create arenas with. It lives, unchanged, for the rest of the
/// process, as `arenas.create` requires.
pub(crate) fn table() -> CtlResult<*mut ffi::extent_hooks_t> {
    HOOKS
        .get_or_init(|| {
            let default = ctl::default_extent_hooks()?;
            let mut ours = default;
            ours.alloc = Some(alloc);
            // jemalloc never unmaps what an arena of its own releases when it retains
            // (the default on 64-bit Linux), and a missing `dalloc` hook means the same
            // to it; so ours has none, and behaves as the default does. (With `retain`
            // off, the arena's unused memory then stays mapped but not resident.)
            // `owns` relies on it: nothing an arena mapped is ever unmapped.
            ours.dalloc = None;
            ours.merge = Some(merge);
            ours.decommit = Some(decommit);
            ours.purge_lazy = Some(purge_lazy);
            ours.purge_forced = Some(purge_forced);
            Ok(Hooks {
                default,
                ours: UnsafeCell::new(ours),
            })
        })
        .as_ref()
        .map(|hooks| hooks.ours.get())
        .map_err(|e| *e)
}

/// Maps `size` bytes for an arena, aligned to `alignment` and to a granule, in whole
/// granules, and marks them owned; null if the OS refuses, or if jemalloc asks for a
/// given address (`new_addr`), which it does only when it does not retain memory (and
/// then falls back to asking for any address).
///
/// The memory is committed and zeroed, as fresh anonymous mappings are; jemalloc is
/// told so through `zero` and `commit`.
unsafe extern "C" fn alloc(
    _hooks: *mut ffi::extent_hooks_t,
    new_addr: *mut c_void,
    size: usize,
    alignment: usize,
    zero: *mut bool,
    commit: *mut bool,
    _arena: c_uint,
) -> *mut c_void {
    if !new_addr.is_null() || size == 0 {
        return ptr::null_mut();
    }
    let align = alignment.max(GRANULE);
    if !align.is_power_of_two() {
        return ptr::null_mut();
    }
    let Some(len) = size.checked_next_multiple_of(GRANULE) else {
        return ptr::null_mut();
    };
    // SAFETY: `sysconf` has no preconditions (glibc answers this from memory).
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let Some(span) = len.checked_add(align - page) else {
        return ptr::null_mut();
    };
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing
    // touches no existing memory.
    let base = unsafe {
        libc::mmap(
            ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return ptr::null_mut();
    }
    let base = base as usize;
    let start = base.next_multiple_of(align);
    let end = start + len;
    // Unmap the slack on either side, so that the mapping is exactly the aligned
    // granules: nothing of ours is left that `owns` does not mark, or the reverse.
    // SAFETY: both ranges lie inside the mapping just made, which nothing else knows.
    unsafe {
        if start > base {
            libc::munmap(base as *mut c_void, start - base);
        }
        if base + span > end {
            libc::munmap(end as *mut c_void, base + span - end);
        }
    }
    if (end - 1) >> ADDRESS_BITS != 0 {
        // Beyond what `owns` covers: give it back and fail.
        // SAFETY: the aligned mapping is ours and unused.
        unsafe { libc::munmap(start as *mut c_void, len) };
        return ptr::null_mut();
    }
    mark(start, len);
    // SAFETY: jemalloc passes valid pointers to its two flags.
    unsafe {
        *zero = true;
        *commit = true;
    }
    start as *mut c_void
}

/// Counts a call on this thread, then returns what jemalloc's own hook `pick` does (or
/// "failed", `true`, if jemalloc has none).
fn forward(
    pick: impl FnOnce(&ffi::extent_hooks_t) -> Option<ffi::extent_decommit_t>,
    hooks: *mut ffi::extent_hooks_t,
    args: (*mut c_void, usize, usize, usize, c_uint),
) -> bool {
    let _ = GAVE_BACK.try_with(|n| n.set(n.get().wrapping_add(1)));
    if let Some(calls) = CALLS.get(args.4 as usize) {
        calls.fetch_add(1, Ordering::Relaxed);
    }
    let Some(Ok(table)) = HOOKS.get() else {
        return true;
    };
    match pick(&table.default) {
        // SAFETY: jemalloc calls this hook with the arguments of the one it stands
        // for, which are passed on unchanged to jemalloc's own.
        Some(hook) => unsafe { hook(hooks, args.0, args.1, args.2, args.3, args.4) },
        None => true,
    }
}

/// Defines a hook with the signature jemalloc gives `decommit`, `purge_lazy` and
/// `purge_forced`, which forwards to jemalloc's own hook of that name.
macro_rules! counted_hook {
    ($name:ident) => {
        unsafe extern "C" fn $name(
            hooks: *mut ffi::extent_hooks_t,
            addr: *mut c_void,
            size: usize,
            offset: usize,
            length: usize,
            arena: c_uint,
        ) -> bool {
            forward(|d| d.$name, hooks, (addr, size, offset, length, arena))
        }
    };
}

counted_hook!(decommit);
counted_hook!(purge_lazy);
counted_hook!(purge_forced);

/// Whether two adjacent extents of one of this crate's arenas may become one: always,
/// where the OS lets one mapping be split and joined at any page (everywhere but
/// Windows), since these arenas never take memory from the data segment.
///
/// jemalloc's own `merge` hook decides the same, but first looks up the calling
/// thread's state, which on a thread that has only ever freed memory sets up its
/// thread cache: an allocation, made while jemalloc holds the arena's extent lock.
unsafe extern "C" fn merge(
    _hooks: *mut ffi::extent_hooks_t,
    _addr_a: *mut c_void,
    _size_a: usize,
    _addr_b: *mut c_void,
    _size_b: usize,
    _committed: bool,
    _arena: c_uint,
) -> bool {
    // `true`: refused.
    cfg!(windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_whole_granules_only() {
        // An address range far from anything mapped in a test process.
        let start = 0x5a00_0000_0000;
        assert!(!owns(start));
        mark(start, 2 * GRANULE);
        assert!(owns(start));
        assert!(owns(start + GRANULE + 12345));
        assert!(!owns(start + 2 * GRANULE));
        assert!(!owns(start - 1));
        assert!(!owns(usize::MAX));
    }
}
