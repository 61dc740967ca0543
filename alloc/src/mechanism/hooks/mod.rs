//! The extent hooks of every arena this crate creates: what jemalloc calls to map
//! memory for an arena and to give its pages back.
//!
//! - `alloc` maps memory itself, in whole granules of [`GRANULE`] (2 MiB) aligned to
//!   one, and notes each granule's arena in the map of the address space
//!   ([`crate::mechanism::map`]), which then tells exactly whether an address lies in
//!   memory of this crate's arenas, and in which. Nothing else shares a granule (the
//!   tail past what jemalloc asked for stays mapped, untouched, so never resident), and
//!   nothing is ever unmapped (there is no `dalloc` hook), so an entry never goes
//!   stale.
//! - `decommit`, `purge_lazy` and `purge_forced` count their calls in the arena's entry
//!   of [`crate::mechanism::table`] and per thread ([`crate::policy::purge`] tells from
//!   the counts whether a purge ran), and mark an arena that stands by; `purge_forced`
//!   gives the range back itself ([`dont_need`]); the others forward to jemalloc's own
//!   hooks, or for an arena with huge pages to [`huge`], which gives pages back so that
//!   huge pages come back whole; so does `commit`.
//! - `merge` answers without jemalloc's thread state (see [`merge`]).
//! - `alloc` and `split` count the extents they make ([`carved`]).
//!
//! Nothing here decides when pages go back: that is [`crate::policy::decay`]'s.

mod huge;

pub(crate) use self::huge::arena_created as huge_arena_created;

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_uint, c_void};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use tikv_jemalloc_sys as ffi;

use crate::mechanism::ctl::{self, CtlResult};
use crate::mechanism::faults::{self, Fault};
use crate::mechanism::fork;
use crate::mechanism::map::{self, ADDRESS_BITS, GRANULE};
use crate::mechanism::table;

thread_local! {
    /// Calls of the hooks that gave pages back (or tried to) on this thread. A plain
    /// `Cell` without destructor: readable at any point of a thread's life.
    static GAVE_BACK: Cell<u64> = const { Cell::new(0) };
}

/// Calls of the hooks that give pages back made on the calling thread, so far.
pub(crate) fn gave_back_here() -> u64 {
    GAVE_BACK.try_with(Cell::get).unwrap_or(0)
}

/// Calls of arena `index`'s hooks that gave pages back, on any thread, so far.
pub(crate) fn gave_back(index: u32) -> u64 {
    table::get(index).map_or(0, |state| state.give_backs.load(Ordering::Relaxed))
}

/// Extents arena `index`'s hooks have made so far, on any thread: new mappings and
/// extents cut in two. An extent jemalloc hands out for an allocation is one of these,
/// or a free extent of the arena's taken whole.
pub(crate) fn carved(index: u32) -> u64 {
    table::get(index).map_or(0, |state| state.carves.load(Ordering::Relaxed))
}

/// Bytes arena `index`'s hooks have given back so far, on any thread: the ranges of the
/// calls that succeeded (a `decommit` that fails is followed by a purge of the same
/// range), what jemalloc's statistics count as purged, without a refresh of them.
pub(crate) fn bytes_given_back(index: u32) -> u64 {
    table::get(index).map_or(0, |state| state.bytes_given_back.load(Ordering::Relaxed))
}

/// Ranges arena `index`'s `purge_forced` hook failed to give back (the kernel refused
/// [`dont_need`]), so far: their pages stay resident. (A `decommit` that fails is no
/// failure: jemalloc then purges the range, and on Linux, where memory is
/// overcommitted, jemalloc's own `decommit` always declines.)
pub(crate) fn failed(index: u32) -> u64 {
    table::get(index).map_or(0, |state| state.give_backs_failed.load(Ordering::Relaxed))
}

/// Counts `length` bytes given back by a hook of arena `arena` that succeeded.
fn count_bytes(arena: c_uint, failed: bool, length: usize) {
    if failed {
        return;
    }
    if let Some(state) = table::get(arena) {
        state
            .bytes_given_back
            .fetch_add(length as u64, Ordering::Relaxed);
    }
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
            // `arena_of` relies on it: nothing an arena mapped is ever unmapped.
            ours.dalloc = None;
            ours.merge = Some(merge);
            ours.split = Some(split);
            ours.commit = Some(commit);
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

/// Maps `size` bytes for arena `arena`, aligned to `alignment` and to a granule, in
/// whole granules, and notes them as the arena's; null if the OS refuses, or if jemalloc asks for a
/// given address (`new_addr`), which it does only when it does not retain memory (and
/// then falls back to asking for any address).
///
/// The memory is zeroed, as fresh anonymous mappings are, and committed, except in an
/// arena with huge pages when jemalloc lets the hook choose (see [`huge::mapped`]);
/// jemalloc is told through `zero` and `commit`.
unsafe extern "C" fn alloc(
    _hooks: *mut ffi::extent_hooks_t,
    new_addr: *mut c_void,
    size: usize,
    alignment: usize,
    zero: *mut bool,
    commit: *mut bool,
    arena: c_uint,
) -> *mut c_void {
    let _in_hook = fork::in_hook();
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
    if faults::should_fail(Fault::Map) {
        return ptr::null_mut();
    }
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
    // granules: nothing of ours is left that `arena_of` does not know, or the reverse.
    // SAFETY: both ranges lie inside the mapping just made, which nothing else knows.
    unsafe {
        if start > base {
            libc::munmap(base as *mut c_void, start - base);
        }
        if base + span > end {
            libc::munmap(end as *mut c_void, base + span - end);
        }
    }
    if (end - 1) >> ADDRESS_BITS != 0 || !map::note(start, len, arena) {
        // Beyond what the map covers, or no page for its leaf: give it back and fail.
        // SAFETY: the aligned mapping is ours and unused.
        unsafe { libc::munmap(start as *mut c_void, len) };
        return ptr::null_mut();
    }
    // SAFETY: jemalloc passes valid pointers to its two flags.
    unsafe {
        *zero = true;
        *commit = huge::mapped(arena, start, size, alignment, *commit);
    }
    count_carve(arena);
    start as *mut c_void
}

/// Counts an extent made for arena `arena` (see [`carved`]).
fn count_carve(arena: c_uint) {
    if let Some(state) = table::get(arena) {
        state.carves.fetch_add(1, Ordering::Relaxed);
    }
}

/// `split`: cuts an extent of size `size` at `addr` in two, as jemalloc's own hook
/// does, and counts it (see [`carved`]).
unsafe extern "C" fn split(
    hooks: *mut ffi::extent_hooks_t,
    addr: *mut c_void,
    size: usize,
    size_a: usize,
    size_b: usize,
    committed: bool,
    arena: c_uint,
) -> bool {
    let _in_hook = fork::in_hook();
    count_carve(arena);
    match defaults().and_then(|d| d.split) {
        // SAFETY: jemalloc calls this hook with the arguments of its own, which are
        // passed on unchanged.
        Some(own) => unsafe { own(hooks, addr, size, size_a, size_b, committed, arena) },
        // `true`: refused (jemalloc then takes a whole extent, or maps a new one).
        None => true,
    }
}

/// Counts a call, on this thread and for arena `arena`, of a hook that gives pages back,
/// and marks the arena if it stands by.
fn count(arena: c_uint) {
    #[cfg(test)]
    hold::wait_if_held(arena);
    let _ = GAVE_BACK.try_with(|n| n.set(n.get().wrapping_add(1)));
    if let Some(state) = table::get(arena) {
        state.give_backs.fetch_add(1, Ordering::Relaxed);
    }
    table::mark_if_standing_by(arena);
}

/// For tests: the hooks that give pages back in one arena made to wait, inside
/// jemalloc (so with a purge of its own under way in that arena), until a condition
/// holds: the state a purge of jemalloc's is in when its thread is descheduled midway.
#[cfg(test)]
pub(crate) mod hold {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Mutex;

    static ARENA: AtomicU32 = AtomicU32::new(u32::MAX);
    static REACHED: AtomicBool = AtomicBool::new(false);
    static UNTIL: Mutex<Option<fn() -> bool>> = Mutex::new(None);

    /// From now on the hooks of arena `index` that give pages back wait until `until`
    /// answers `true` or [`release`] is called.
    pub(crate) fn hold(index: u32, until: fn() -> bool) {
        *UNTIL.lock().unwrap() = Some(until);
        REACHED.store(false, Ordering::SeqCst);
        ARENA.store(index, Ordering::SeqCst);
    }

    /// Whether a hook has been held since [`hold`].
    pub(crate) fn reached() -> bool {
        REACHED.load(Ordering::SeqCst)
    }

    /// Lets held hooks go on, and holds no more.
    pub(crate) fn release() {
        ARENA.store(u32::MAX, Ordering::SeqCst);
    }

    pub(super) fn wait_if_held(index: u32) {
        if ARENA.load(Ordering::SeqCst) != index {
            return;
        }
        REACHED.store(true, Ordering::SeqCst);
        let until = (*UNTIL.lock().unwrap()).unwrap_or(|| true);
        while ARENA.load(Ordering::SeqCst) == index && !until() {
            std::thread::yield_now();
        }
    }
}

/// jemalloc's own hooks, once the table is built.
fn defaults() -> Option<&'static ffi::extent_hooks_t> {
    match HOOKS.get() {
        Some(Ok(table)) => Some(&table.default),
        _ => None,
    }
}

/// Returns what jemalloc's own hook `pick` does (or "failed", `true`, if jemalloc has
/// none).
fn forward(
    pick: impl FnOnce(&ffi::extent_hooks_t) -> Option<ffi::extent_decommit_t>,
    hooks: *mut ffi::extent_hooks_t,
    args: (*mut c_void, usize, usize, usize, c_uint),
) -> bool {
    match defaults().and_then(pick) {
        // SAFETY: jemalloc calls this hook with the arguments of the one it stands
        // for, which are passed on unchanged to jemalloc's own.
        Some(hook) => unsafe { hook(hooks, args.0, args.1, args.2, args.3, args.4) },
        None => true,
    }
}

/// Defines a hook with the signature jemalloc gives `commit`, `decommit`, `purge_lazy`
/// and `purge_forced`, which counts its calls if `counted` and calls jemalloc's own
/// hook of that name; or, in an arena with huge pages, `huge` (if given) with the arena
/// and the range `[addr + offset, addr + offset + length)`.
macro_rules! range_hook {
    ($name:ident, counted: $counted:literal, huge: $huge:expr) => {
        unsafe extern "C" fn $name(
            hooks: *mut ffi::extent_hooks_t,
            addr: *mut c_void,
            size: usize,
            offset: usize,
            length: usize,
            arena: c_uint,
        ) -> bool {
            let _in_hook = fork::in_hook();
            if $counted {
                count(arena);
            }
            let huge: Option<fn(u32, usize, usize) -> bool> = $huge;
            let huge_pages = table::get(arena).is_some_and(|state| state.has_huge_pages());
            let failed = match huge.filter(|_| huge_pages) {
                Some(huge) => huge(arena, addr as usize + offset, length),
                None => forward(|d| d.$name, hooks, (addr, size, offset, length, arena)),
            };
            if $counted {
                count_bytes(arena, failed, length);
            }
            failed
        }
    };
}

range_hook!(commit, counted: false, huge: Some(huge::commit));
range_hook!(decommit, counted: true, huge: Some(huge::decommit));
// In an arena with huge pages, jemalloc purges a range only if `decommit` failed; the
// range then stays committed, as in arenas without huge pages.
range_hook!(purge_lazy, counted: true, huge: None);

/// `purge_forced`: `[addr + offset, addr + offset + length)` goes back at once and reads
/// as zeros after ([`dont_need`], what jemalloc's own hook does on Linux), in every
/// arena; counted as the other hooks that give pages back are.
unsafe extern "C" fn purge_forced(
    _hooks: *mut ffi::extent_hooks_t,
    addr: *mut c_void,
    _size: usize,
    offset: usize,
    length: usize,
    arena: c_uint,
) -> bool {
    let _in_hook = fork::in_hook();
    count(arena);
    let start = addr as usize + offset;
    let failed = dont_need(start, start + length);
    count_bytes(arena, failed, length);
    if failed {
        if let Some(state) = table::get(arena) {
            state.give_backs_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    failed
}

/// How many times a range is given back before its failure is taken as final.
const GIVE_BACK_ATTEMPTS: u32 = 3;

/// `MADV_DONTNEED` on `[start, end)`, free memory of one of this crate's arenas: its
/// pages go back at once, and read as zeros after. Tried again, up to
/// [`GIVE_BACK_ATTEMPTS`] in all, when the kernel answers `EAGAIN` or `EINTR`; returns
/// `true` if it still refused. No spin: each attempt is a system call.
pub(crate) fn dont_need(start: usize, end: usize) -> bool {
    for _ in 0..GIVE_BACK_ATTEMPTS {
        let errno = if faults::should_fail(Fault::GiveBack) {
            libc::EAGAIN
        } else {
            // SAFETY: the range is free memory of one of this crate's arenas, holding
            // no live data (a range jemalloc gives back, or a huge page none of whose
            // pages jemalloc holds committed); the mapping stays, and reads back zeros.
            match unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) } {
                0 => return false,
                _ => std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            }
        };
        if errno != libc::EAGAIN && errno != libc::EINTR {
            break;
        }
    }
    true
}

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
