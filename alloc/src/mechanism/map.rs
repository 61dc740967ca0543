//! The map of the address space: for each 2 MiB granule, the arena of this crate's whose
//! memory it is (if any), and for arenas with huge pages the count of pages jemalloc
//! holds committed in it.
//!
//! The extent hooks map arenas' memory in whole granules, aligned, that nothing else
//! shares (see [`crate::mechanism::hooks`]), and note each granule here before jemalloc
//! sees it; a granule is never unmapped. So [`arena_of`] tells, exactly and with two
//! loads, whether an address lies in memory of this crate's arenas, and in which: what
//! lets a free find its arena, and a hook that wraps another allocator route each block
//! back to the allocator that made it. A leaf of the map covers 4 GiB and is made, by
//! `mmap`, the first time a granule in it is noted; nothing here allocates from
//! jemalloc.

use std::ffi::c_uint;
use std::mem::size_of;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// The unit in which arenas' memory is mapped and owned: 2 MiB, the x86-64 huge page.
pub(crate) const GRANULE: usize = 2 << 20;

/// Addresses [`arena_of`] covers: the 47-bit user address space of x86-64 and AArch64
/// Linux (mappings above it are made only when asked for with a hint above it).
pub(crate) const ADDRESS_BITS: u32 = 47;

/// Address bits a leaf of the map covers: 4 GiB, 2,048 granules.
const LEAF_BITS: u32 = 32;

const GRANULES_PER_LEAF: usize = 1 << (LEAF_BITS - GRANULE.trailing_zeros());

/// One leaf of the map, for 4 GiB of address space.
struct Leaf {
    /// Each granule's arena index plus one, 0 for memory not ours.
    arenas: [AtomicU32; GRANULES_PER_LEAF],
    /// For arenas with huge pages, each granule's pages that jemalloc holds committed
    /// (see [`crate::mechanism::huge`]), which that module alone reads and writes.
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

/// The count of committed pages of the granule at `addr` (see
/// [`crate::mechanism::huge`]), if it is memory of this crate's arenas.
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
pub(crate) fn note(start: usize, len: usize, arena: c_uint) -> bool {
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
