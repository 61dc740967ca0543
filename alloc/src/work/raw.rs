//! `RawAlloc`: the phase's routing for code that does not allocate through
//! `GlobalAlloc`, and the exact test of whether a block is one of ours.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use tikv_jemalloc_sys as ffi;

use crate::mechanism::ctl::{self, CtlResult};
use crate::mechanism::map;
use crate::mechanism::table::Use;
use crate::policy::{decay, idle, phase_peak, purge};
use crate::work::binding;
use crate::work::percpu::PerCpu;
use crate::work::route::{self, FLOOR};

/// From this size up, a block that [`RawAlloc::realloc`] grows tries to grow in place,
/// and takes twice its usable size when it must move.
pub(crate) const GROW_FLOOR: usize = 1 << 20;

/// Arenas for [`RawAlloc`]'s blocks outside phases and scopes, one per CPU: they keep
/// freed pages as jemalloc's automatic arenas do, whatever their size (see
/// [`decay::keep_as_outside`]), and every page of theirs is known to
/// [`RawAlloc::owns`].
static ARENAS: PerCpu = PerCpu::new();

/// Arenas for the blocks that [`RawAlloc::realloc`] moves as they grow, outside phases
/// and scopes, one per CPU, set up as [`ARENAS`]: a growing buffer lives apart from
/// the blocks it is made of, and a move out of one of them gives its free pages back
/// (see [`RawAlloc::realloc`]).
static GROWN: PerCpu = PerCpu::new();

/// Which arenas are [`GROWN`]'s, by index: one load tells a growing buffer's block.
static IS_GROWN: [AtomicBool; ctl::ARENAS_ALL as usize] =
    [const { AtomicBool::new(false) }; ctl::ARENAS_ALL as usize];

/// Allocation for code that does not go through Rust's `GlobalAlloc`, with the routing
/// of [`ArenaAlloc`](crate::ArenaAlloc): a C library's allocator hooks, an
/// interpreter's raw allocator, an array library's data allocator.
///
/// Where a block goes:
/// - on a thread in a scope or pool job: that thread's arena;
/// - in a [`phase`](crate::phase), from [`phase_threshold`](crate::phase_threshold)
///   bytes up: the phase arena of the calling thread's CPU;
/// - otherwise: an arena of this crate's per CPU that keeps freed pages for reuse as
///   jemalloc's own do (they decay over 10 s), whatever their size: a large buffer
///   reused in a loop is not given back at every free. A block that
///   [`realloc`](RawAlloc::realloc) moves as it grows goes to another such arena, for
///   growing blocks. What they keep goes back when the process goes idle
///   ([`set_idle_return`](crate::set_idle_return)), at the next phase's end, or by
///   [`trim`](crate::trim).
///
/// Where that arena has no room for the block, or cannot be made (these arenas are made
/// on first use; jemalloc may refuse a new one, at its limit of arenas or with no
/// address space left for its metadata), any other arena of this crate's that has room
/// takes it: each keeps the address space it mapped, and memory that earlier work freed
/// there can be given out again, even when the address space is full.
///
/// Every block is jemalloc's and bypasses thread caches (so no thread keeps a freed
/// block's pages), and [`owns`](RawAlloc::owns) tells exactly whether a pointer is one
/// of them: the way for a hook that wraps another allocator to route each `free` and
/// `realloc` to the allocator that made the block. All functions are thread-safe, need
/// no lock of the caller's (such as an interpreter's global lock), never unwind, and
/// report failure with a null pointer. They work whether or not `ArenaAlloc` is the
/// global allocator.
///
/// ```
/// use arenapool_alloc::RawAlloc;
///
/// let block = RawAlloc::alloc(1 << 20, 64);
/// assert!(!block.is_null() && RawAlloc::owns(block));
/// let on_the_stack = 0u8;
/// assert!(!RawAlloc::owns(&on_the_stack));
/// // SAFETY: `block` came from `RawAlloc`, 1 MiB long, and is freed once.
/// unsafe {
///     block.write_bytes(1, 1 << 20);
///     let block = RawAlloc::realloc(block, 2 << 20, 64);
///     assert_eq!(*block.add((1 << 20) - 1), 1);
///     RawAlloc::free(block);
/// }
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct RawAlloc;

impl RawAlloc {
    /// Allocates `size` bytes (at least 1) aligned to `align`, uninitialised; null if
    /// `align` is not a power of two, or if memory or an arena cannot be had.
    pub fn alloc(size: usize, align: usize) -> *mut u8 {
        let size = size.max(1);
        // SAFETY: `size` is non-zero and the flags are valid (an existing arena, a
        // power-of-two alignment).
        attempt(size, align, |flags| unsafe { ffi::mallocx(size, flags) })
    }

    /// Like [`alloc`](RawAlloc::alloc), with the memory zeroed.
    pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
        let size = size.max(1);
        // SAFETY: as in `alloc`.
        attempt(size, align, |flags| unsafe {
            ffi::mallocx(size, flags | ffi::MALLOCX_ZERO)
        })
    }

    /// Resizes a block to `new_size` bytes (at least 1), aligned to `align`, keeping
    /// its contents up to the smaller size; the block may move, and where it moves to
    /// follows the same routing as [`alloc`](RawAlloc::alloc). A null `ptr` allocates.
    /// On failure returns null and leaves the block as it was.
    ///
    /// A block of 1 MiB or more that grows first tries to grow where it is; one that
    /// must move takes at least twice its usable size (the pages past what was asked
    /// for are not touched, so not resident, and a later call for a smaller size gives
    /// the tail back to its arena, where the next growth takes it in place, except in an
    /// arena for growing blocks, below, for a size of at least half the block). A buffer
    /// that grows by small steps (CPython's `BytesIO` by an eighth) so moves a few
    /// times, not at every step. Grown by eighths from 1 to 96 MiB, a block moves at
    /// most 8 times, where it moved 24 times before.
    ///
    /// Outside phases and scopes, such a move goes to an arena of its own for growing
    /// blocks, one per CPU, and a move out of that arena gives back the free pages
    /// there, the block just left among them: the blocks a buffer grew out of are not
    /// kept. Kept, they added up to more than the buffer itself (a loky worker that
    /// pickled 46 MB of results held 50 MiB of arrays, a 92 MiB buffer and 110 MiB of
    /// blocks it grew out of), passed the bound on what the arenas keep free at every
    /// batch and took the arrays' pages back with them. There a block also keeps its
    /// size while the size asked for fits in it and is at least half of it (its usable
    /// size stays what it was): a buffer made again the same size starts where the last
    /// one was freed, and grows there in place: no move, no copy, no page faulted in
    /// again.
    ///
    /// Outside phases and scopes, a block of 1 MiB or more cut to less than 1 MiB moves
    /// to a block of the new size (a copy of under 1 MiB), and is freed whole. Cut
    /// where it is, its tail would be a free extent of its own, and a block of the old
    /// size asked for next would not fit there: CPython's `os.read` takes a block of
    /// the size asked for and cuts it to what was read, so a pipe read in 64 KiB pieces
    /// into blocks of the message's remaining size took fresh pages at every read, and
    /// faulted them in.
    ///
    /// # Safety
    ///
    /// `ptr` is null or a live block of [`RawAlloc`]'s (see [`owns`](RawAlloc::owns)),
    /// which is not used again unless null is returned; `align` is at least what it was
    /// allocated with.
    pub unsafe fn realloc(ptr: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        if ptr.is_null() {
            return Self::alloc(new_size, align);
        }
        let size = new_size.max(1);
        let arena = map::arena_of(ptr as usize);
        let outside = arena.is_some_and(phase_peak::serves_outside);
        let grown = arena.is_some_and(is_grown);
        // The usable size, read while the block is live: what a move frees (counted for
        // an arena for blocks outside phases, see `phase_peak`), what a growth starts
        // from, and what a cut is cut from.
        let usable = if outside || size >= GROW_FLOOR {
            // SAFETY: a live block of jemalloc's (the caller's contract).
            unsafe { ffi::sallocx(ptr.cast(), 0) }
        } else {
            0
        };
        // A growing buffer's block stays as it is while the size fits in it and takes
        // at least half of it: cut to each size asked for, its tail would be a free
        // extent of its own, too small for the next step to grow into in place.
        if grown
            && size <= usable
            && size >= usable / 2
            && align.is_power_of_two()
            && (ptr as usize) & (align - 1) == 0
        {
            return ptr;
        }
        // Outside phases and scopes, a large block cut to less than `GROW_FLOOR` moves,
        // whole, to a block of the new size: cut where it is, its tail would be a free
        // extent of its own, which the next block of the old size does not fit in. The
        // block left counts as `size` bytes freed towards the bound on what is kept:
        // like a cut's tail (which counts as nothing), its pages past them were likely
        // never written, and a look at the bound at every read would cost more than
        // the move saves.
        if outside && usable >= GROW_FLOOR && size < GROW_FLOOR {
            let moved = Self::alloc(size, align);
            if !moved.is_null() {
                // SAFETY: `size` bytes fit in both blocks (`size` < `usable`), which are
                // distinct; `ptr` is live (the caller's contract) and freed once.
                unsafe {
                    moved.copy_from_nonoverlapping(ptr, size);
                    free_counted(ptr, Some(size));
                }
                return moved;
            }
        }
        let mut ask = size;
        let mut grows = false;
        if size >= GROW_FLOOR && size > usable && align.is_power_of_two() {
            let flags = route::mallocx_flags(None, align, size);
            // SAFETY: `ptr` is a live block of jemalloc's (the caller's contract), the
            // size non-zero, the flags valid (no arena: `xallocx` keeps the block in
            // its own); the block stays where it is, grown or not.
            if unsafe { ffi::xallocx(ptr.cast(), size, 0, flags) } >= size {
                return ptr;
            }
            ask = size.max(usable.saturating_mul(2));
            grows = true;
        }
        let realloc = |size| {
            // SAFETY: `ptr` is a live block of jemalloc's (the caller's contract), the
            // size non-zero, the flags valid; a failed call leaves the block as it was.
            attempt_in(size, align, grows, |flags| unsafe {
                ffi::rallocx(ptr.cast(), size, flags)
            })
        };
        let mut block = realloc(ask);
        if block.is_null() && ask > size {
            block = realloc(size);
        }
        if outside && !block.is_null() && block != ptr {
            match arena {
                // The block it grew out of, and any other free pages there, go back.
                Some(left) if grown => {
                    let _ = purge::purge(left);
                }
                // A block that moves out of an arena for blocks outside phases is
                // freed there: counted as a free is (see `phase_peak`).
                _ => phase_peak::freed_outside(usable),
            }
        }
        block
    }

    /// Frees a block. Null does nothing.
    ///
    /// # Safety
    ///
    /// `ptr` is null or a live block of [`RawAlloc`]'s, not used again.
    pub unsafe fn free(ptr: *mut u8) {
        if !ptr.is_null() {
            // SAFETY: a live block of RawAlloc's, freed once (the caller's contract).
            unsafe { free_counted(ptr, None) }
        }
    }

    /// Whether `ptr` points into memory of this crate's arenas: true for every block
    /// [`RawAlloc`] returned (and for blocks `ArenaAlloc` placed in scopes, pool jobs
    /// and phases), false for memory of any other allocator (the system `malloc`, an
    /// interpreter's own, jemalloc's automatic arenas), the stack and static data.
    ///
    /// Exact, not a guess: arenas map their memory themselves, in aligned 2 MiB
    /// granules that nothing else shares, never unmapped, each noted in a map of the
    /// address space. Two atomic loads; safe to call with any pointer.
    #[inline]
    pub fn owns(ptr: *const u8) -> bool {
        map::arena_of(ptr as usize).is_some()
    }

    /// The usable size of a block: at least what was asked for.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of [`RawAlloc`]'s.
    pub unsafe fn usable_size(ptr: *const u8) -> usize {
        // SAFETY: a live block of jemalloc's (the caller's contract).
        unsafe { ffi::sallocx(ptr.cast(), 0) }
    }
}

/// Frees `ptr`, a live block of [`RawAlloc`]'s, counted as `counted` bytes freed (its
/// usable size if `None`) towards the bound of the arenas it lies in (see
/// [`phase_peak`]), if they keep what is freed.
///
/// # Safety
///
/// `ptr` is a live block of [`RawAlloc`]'s, not used again.
unsafe fn free_counted(ptr: *mut u8, counted: Option<usize>) {
    idle::notice_free();
    let mut kept = None;
    let _ = purge::free(ptr, None, |arena| {
        // The size of a block that a phase arena, or one for blocks outside phases,
        // keeps, read while it is live.
        if let Some(arena) = arena {
            if phase_peak::keeps(arena) || phase_peak::serves_outside(arena) {
                // SAFETY: a live block of jemalloc's (the caller's contract).
                let usable = || unsafe { ffi::sallocx(ptr.cast(), 0) };
                kept = Some((arena, counted.unwrap_or_else(usable)));
            }
        }
        // SAFETY: a live block of jemalloc's, freed once (the caller's contract),
        // straight to its arena.
        unsafe { ffi::dallocx(ptr.cast::<c_void>(), ffi::MALLOCX_TCACHE_NONE) };
    });
    match kept {
        Some((arena, size)) if phase_peak::serves_outside(arena) => phase_peak::freed_outside(size),
        Some((_, size)) => phase_peak::freed(size),
        None => {}
    }
}

/// Calls `op` (a call into jemalloc) with jemalloc's flags for a block of `size` bytes
/// aligned to `align` asked for by the calling thread (its arena, see [`RawAlloc`]; no
/// thread cache; the alignment); if that fails for want of memory in an arena of this
/// crate's, calls it again with each other arena of this crate's until one succeeds
/// (see [`route::elsewhere`]); if no arena could be made for the block, with each arena
/// of this crate's that exists (see [`route::in_any`]). Null if none has room, or if
/// `align` is not a power of two.
fn attempt(size: usize, align: usize, op: impl Fn(c_int) -> *mut c_void) -> *mut u8 {
    attempt_in(size, align, false, op)
}

/// [`attempt`], for a block that grows by moving if `grows` (see [`place`]).
fn attempt_in(
    size: usize,
    align: usize,
    grows: bool,
    op: impl Fn(c_int) -> *mut c_void,
) -> *mut u8 {
    if !align.is_power_of_two() {
        return ptr::null_mut();
    }
    let Some(arena) = place(size, grows) else {
        return route::in_any(|other| op(route::mallocx_flags(Some(other), align, size)));
    };
    let block = op(route::mallocx_flags(arena, align, size));
    if !block.is_null() {
        return block.cast();
    }
    route::elsewhere(arena, |other| {
        op(route::mallocx_flags(Some(other), align, size))
    })
}

/// The arena a block of `size` bytes goes to when the calling thread asks for it
/// (`None`: the thread's own, one of ours); `None` outside if no arena can be made.
/// Outside phases and scopes, a block that grows by moving (`grows`) goes to the
/// thread's arena for growing blocks.
fn place(size: usize, grows: bool) -> Option<Option<u32>> {
    let arena = if let Some(bound) = binding::bound_arena() {
        // No arena named: jemalloc takes the thread's own, one of ours.
        if size >= FLOOR {
            decay::before_large_alloc(bound);
        }
        None
    } else {
        Some(match route::route(size) {
            Some(index) => index,
            None if grows => general_arena(&GROWN, set_up_grown)?,
            None => general_arena(&ARENAS, decay::keep_as_outside)?,
        })
    };
    Some(arena)
}

/// This thread's arena of `set` ([`ARENAS`] or [`GROWN`]), for blocks outside phases,
/// made on first use and set up by `setup`.
fn general_arena(set: &PerCpu, setup: fn(u32) -> CtlResult<()>) -> Option<u32> {
    if let Some(index) = set.pick() {
        return Some(index);
    }
    // No huge pages: these arenas decay as jemalloc's do, in pieces while work runs,
    // which would break huge pages up over and over.
    set.make(false, Use::Raw, setup).ok()?;
    set.pick()
}

/// Sets up arena `index` as one of [`GROWN`]'s: as [`ARENAS`]' are, and marked.
fn set_up_grown(index: u32) -> CtlResult<()> {
    decay::keep_as_outside(index)?;
    if let Some(mark) = IS_GROWN.get(index as usize) {
        mark.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// Whether arena `index` is one of [`GROWN`]'s.
#[inline]
fn is_grown(index: u32) -> bool {
    IS_GROWN
        .get(index as usize)
        .is_some_and(|mark| mark.load(Ordering::Relaxed))
}
