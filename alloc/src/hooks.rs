//! The extent hooks of every arena this crate creates: what jemalloc calls to map
//! memory for an arena and to give its pages back.
//!
//! - `alloc` maps memory itself, in whole granules of [`GRANULE`] (2 MiB) aligned to
//!   one, and notes each granule's arena in a map of the address space: [`arena_of`]
//!   then tells, exactly and with two loads, whether an address lies in memory of this
//!   crate's arenas, and in which. Nothing else shares a granule (the tail past what
//!   jemalloc asked for stays mapped, untouched, so never resident), and nothing is ever
//!   unmapped (there is no `dalloc` hook), so an entry never goes stale.
//! - `decommit`, `purge_lazy` and `purge_forced` count their calls, per arena and per
//!   thread ([`crate::purge`] tells from the counts whether a purge ran), then forward
//!   to jemalloc's own hooks, or for an arena with huge pages to [`crate::huge`], which
//!   gives pages back so that huge pages come back whole; so does `commit`.
//! - `merge` answers without jemalloc's thread state (see [`merge`]).
//!
//! Nothing here decides when pages go back: that is [`crate::purge`]'s.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_uint, c_void};
use std::mem::size_of;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use tikv_jemalloc_sys as ffi;

use crate::ctl::{self, CtlResult, ARENAS_ALL};
use crate::faults::{self, Fault};
use crate::{huge, standby};

/// The unit in which arenas' memory is mapped and owned: 2 MiB, the x86-64 huge page.
pub(crate) const GRANULE: usize = 2 << 20;

/// Addresses [`arena_of`] covers: the 47-bit user address space of x86-64 and AArch64
/// Linux (mappings above it are made only when asked for with a hint above it).
const ADDRESS_BITS: u32 = 47;

/// Address bits a leaf of the map covers: 4 GiB, 2,048 granules.
const LEAF_BITS: u32 = 32;

const GRANULES_PER_LEAF: usize = 1 << (LEAF_BITS - GRANULE.trailing_zeros());

/// One leaf of the map, for 4 GiB of address space.
struct Leaf {
    /// Each granule's arena index plus one, 0 for memory not ours.
    arenas: [AtomicU32; GRANULES_PER_LEAF],
    /// For arenas with huge pages, each granule's pages that jemalloc holds committed
    /// (see [`crate::huge`]), which that module alone reads and writes.
    committed: [AtomicU32; GRANULES_PER_LEAF],
}

/// The map of the address space, granule to arena: a leaf per 4 GiB that arenas mapped
/// memory in, made by the `alloc` hook (16 KiB each); 256 KiB of zero-initialised
/// static memory for the leaves' addresses.
static MAP: [AtomicPtr<Leaf>; 1 << (ADDRESS_BITS - LEAF_BITS)] =
    [const { AtomicPtr::new(ptr::null_mut()) }; 1 << (ADDRESS_BITS - LEAF_BITS)];

/// The arena whose memory `addr` lies in, if it is one of this crate's: exact, since no
/// other allocator's memory shares a granule with theirs.
#[inline]
pub(crate) fn arena_of(addr: usize) -> Option<u32> {
    // Acquire, here and below: pairs with the Release of `note`, so a block handed
    // from the thread that mapped it to this one is seen as ours.
    let leaf = MAP.get(addr >> LEAF_BITS)?.load(Ordering::Acquire);
    if leaf.is_null() {
        return None;
    }
    let granule = (addr >> GRANULE.trailing_zeros()) % GRANULES_PER_LEAF;
    // SAFETY: a non-null entry points to a leaf made by `leaf_for`, never freed.
    match unsafe { &*leaf }.arenas[granule].load(Ordering::Acquire) {
        0 => None,
        index => Some(index - 1),
    }
}

/// The count of committed pages of the granule at `addr` (see [`crate::huge`]), if it
/// is memory of this crate's arenas.
pub(crate) fn committed_pages(addr: usize) -> Option<&'static AtomicU32> {
    let leaf = MAP.get(addr >> LEAF_BITS)?.load(Ordering::Acquire);
    if leaf.is_null() {
        return None;
    }
    // SAFETY: a non-null entry points to a leaf made by `leaf_for`, never freed.
    Some(&unsafe { &*leaf }.committed[(addr >> GRANULE.trailing_zeros()) % GRANULES_PER_LEAF])
}

/// Calls `f` with the count of committed pages of every granule in the map (for a
/// `fork` handler: no allocation, no lock; a load per 4 GiB of address space and a call
/// per granule of the leaves made).
pub(crate) fn for_each_committed_count(mut f: impl FnMut(&AtomicU32)) {
    for slot in &MAP {
        let leaf = slot.load(Ordering::Acquire);
        if leaf.is_null() {
            continue;
        }
        // SAFETY: a non-null entry points to a leaf made by `leaf_for`, never freed.
        unsafe { &*leaf }.committed.iter().for_each(&mut f);
    }
}

/// The leaf for `addr`'s 4 GiB, made if needed; `None` if no page can be had for it.
fn leaf_for(addr: usize) -> Option<&'static Leaf> {
    let slot = MAP.get(addr >> LEAF_BITS)?;
    let mut leaf = slot.load(Ordering::Acquire);
    if leaf.is_null() {
        // SAFETY: a new private anonymous mapping touches no existing memory; zeroed,
        // it is a leaf of zeros (every granule not ours, nothing committed).
        let page = unsafe {
            libc::mmap(
                ptr::null_mut(),
                size_of::<Leaf>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return None;
        }
        match slot.compare_exchange(
            ptr::null_mut(),
            page.cast(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => leaf = page.cast(),
            Err(theirs) => {
                // Another mapping made the leaf first.
                // SAFETY: `page` is ours, unused and unshared.
                unsafe { libc::munmap(page, size_of::<Leaf>()) };
                leaf = theirs;
            }
        }
    }
    // SAFETY: a non-null entry points to a leaf, mapped for the rest of the process.
    Some(unsafe { &*leaf })
}

/// Notes `[start, start + len)`, whole granules inside the covered address space, as
/// arena `arena`'s; false if a leaf could not be made (nothing is then noted).
fn note(start: usize, len: usize, arena: c_uint) -> bool {
    // Checked: nothing may panic in a hook jemalloc calls.
    let Some(entry) = arena.checked_add(1) else {
        return false;
    };
    let granules = (start..start + len).step_by(GRANULE);
    // Make every leaf first, so that a failure leaves no granule noted.
    if granules.clone().any(|g| leaf_for(g).is_none()) {
        return false;
    }
    for granule in granules {
        if let Some(leaf) = leaf_for(granule) {
            leaf.arenas[(granule >> GRANULE.trailing_zeros()) % GRANULES_PER_LEAF]
                .store(entry, Ordering::Release);
        }
    }
    true
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

/// Bytes each arena's hooks gave back, on any thread: the ranges of the calls that
/// succeeded (a `decommit` that fails is followed by a purge of the same range).
static BYTES: [AtomicU64; ARENAS_ALL as usize] = [const { AtomicU64::new(0) }; ARENAS_ALL as usize];

/// Bytes arena `index`'s hooks have given back so far, on any thread: what jemalloc's
/// statistics count as purged, without a refresh of them.
pub(crate) fn bytes_given_back(index: u32) -> u64 {
    BYTES
        .get(index as usize)
        .map_or(0, |bytes| bytes.load(Ordering::Relaxed))
}

/// Ranges each arena's `purge_forced` hook failed to give back (the kernel refused
/// [`dont_need`]): their pages stay resident. (A `decommit` that fails is no failure:
/// jemalloc then purges the range, and on Linux, where memory is overcommitted,
/// jemalloc's own `decommit` always declines.)
static FAILED: [AtomicU64; ARENAS_ALL as usize] =
    [const { AtomicU64::new(0) }; ARENAS_ALL as usize];

/// Ranges arena `index`'s hooks failed to give back, so far.
pub(crate) fn failed(index: u32) -> u64 {
    FAILED
        .get(index as usize)
        .map_or(0, |failed| failed.load(Ordering::Relaxed))
}

/// Counts `length` bytes given back by a hook of arena `arena` that succeeded.
fn count_bytes(arena: c_uint, failed: bool, length: usize) {
    if failed {
        return;
    }
    if let Some(bytes) = BYTES.get(arena as usize) {
        bytes.fetch_add(length as u64, Ordering::Relaxed);
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
    if (end - 1) >> ADDRESS_BITS != 0 || !note(start, len, arena) {
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
    start as *mut c_void
}

/// Counts a call, on this thread and for arena `arena`, of a hook that gives pages back,
/// and tells [`standby`] of it.
fn count(arena: c_uint) {
    let _ = GAVE_BACK.try_with(|n| n.set(n.get().wrapping_add(1)));
    if let Some(calls) = CALLS.get(arena as usize) {
        calls.fetch_add(1, Ordering::Relaxed);
    }
    standby::purging(arena);
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
            if $counted {
                count(arena);
            }
            let huge: Option<fn(u32, usize, usize) -> bool> = $huge;
            let failed = match huge.filter(|_| huge::is_on(arena)) {
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
    count(arena);
    let start = addr as usize + offset;
    let failed = dont_need(start, start + length);
    count_bytes(arena, failed, length);
    if failed {
        if let Some(count) = FAILED.get(arena as usize) {
            count.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_whole_granules_only() {
        // An address range far from anything mapped in a test process.
        let start = 0x5a00_0000_0000;
        assert_eq!(arena_of(start), None);
        assert!(note(start, 2 * GRANULE, 4094));
        assert_eq!(arena_of(start), Some(4094));
        assert_eq!(arena_of(start + GRANULE + 12345), Some(4094));
        assert_eq!(arena_of(start + 2 * GRANULE), None);
        assert_eq!(arena_of(start - 1), None);
        assert_eq!(arena_of(usize::MAX), None);
        // Across a leaf's end.
        let edge = 0x5b00_0000_0000 - GRANULE;
        assert!(note(edge, 2 * GRANULE, 7));
        assert_eq!(
            (arena_of(edge), arena_of(edge + GRANULE)),
            (Some(7), Some(7))
        );
    }
}
