//! pymalloc's pool headers, read and checked against everything pymalloc itself keeps
//! true of them, before any pool is given back.
//!
//! pymalloc carves an arena into pools from its first pool-aligned address on, one
//! after the other, and writes a `struct pool_header` (`pycore_obmalloc.h`, the same
//! from CPython 3.9 to 3.15 in 64-bit builds) at the start of each as it carves it:
//!
//! | offset | field | what pymalloc keeps true of it |
//! |---|---|---|
//! | 0 | `ref.count` (a `uint` in a pointer-sized union) | blocks in use, at most the pool's blocks; the union's other half never written |
//! | 8 | `freeblock` | a block of the pool below `nextoffset`, or null while every carved block is in use |
//! | 16 | `nextpool` | in a free pool, the next free pool of the same arena, or null |
//! | 32 | `arenaindex` | the arena's index in pymalloc's table: the same in all its pools |
//! | 36 | `szidx` | the size class, below the number of classes; arenapool's "none" (`DUMMY_SIZE_IDX`) once a free pool was given back |
//! | 40 | `nextoffset` | the next block never handed out: the header, then two blocks or more, at most the pool's end |
//! | 44 | `maxnextoffset` | the pool's size less one block |
//!
//! A pool not carved yet is all zeros (arenas come from `mmap`); once one is met, no
//! later pool of the arena is carved. An arena whose first pool is not carved, or any of
//! whose headers breaks one of these rules, is not pymalloc's (or not as pymalloc left
//! it): nothing of it is touched.

use std::ptr;

use super::stats::Stats;

/// `DUMMY_SIZE_IDX`: the size index of a pool pymalloc must set up anew before use.
pub(crate) const NO_SIZE_INDEX: u32 = 0xffff;

/// `sizeof(struct pool_header)` in 64-bit builds.
const HEADER_BYTES: usize = 48;
const COUNT_AT: usize = 0;
const COUNT_HIGH_AT: usize = 4;
const FREE_BLOCK_AT: usize = 8;
const NEXT_POOL_AT: usize = 16;
const ARENA_INDEX_AT: usize = 32;
const SIZE_INDEX_AT: usize = 36;
const NEXT_OFFSET_AT: usize = 40;
const MAX_NEXT_OFFSET_AT: usize = 44;

/// The most pools an arena may hold here (a 4 MiB arena of 16 KiB pools; pymalloc's
/// are 1 MiB).
pub(crate) const MAX_POOLS: usize = 256;
/// The most pages an arena may span here.
pub(crate) const MAX_PAGES: usize = 1024;

/// The size of a page.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(usize::MAX)
}

/// The sizes of pymalloc's arenas, pools and blocks in the running interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Bytes of an arena.
    pub(crate) arena: usize,
    /// Bytes of a pool.
    pub(crate) pool: usize,
    /// Bytes of a page.
    pub(crate) page: usize,
    /// Bytes of the header, rounded up to the blocks' alignment (`POOL_OVERHEAD`).
    overhead: usize,
    /// The blocks' alignment, and the step between size classes.
    align: usize,
    /// How many size classes there are.
    classes: u32,
}

/// Why the interpreter's pymalloc cannot have its free pools given back here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unsupported {
    /// A pool is a page or less: a free pool has no page but its header's.
    PoolOfOnePage,
    /// Sizes this module does not read pools of (a 32-bit build, or figures out of the
    /// ranges pymalloc has ever had).
    Layout,
}

impl Geometry {
    /// The geometry of the pymalloc that printed `stats`, on pages of `page` bytes.
    pub(crate) fn new(stats: &Stats, page: usize) -> Result<Self, Unsupported> {
        let Stats {
            arena,
            pool,
            threshold,
            classes,
            ..
        } = *stats;
        if cfg!(not(target_pointer_width = "64"))
            || !pool.is_power_of_two()
            || !arena.is_power_of_two()
            || classes == 0
            || threshold % classes != 0
            || !(threshold / classes).is_power_of_two()
            || threshold / classes < 8
            || arena < pool
            || arena / pool > MAX_POOLS
            || threshold >= pool / 2
        {
            return Err(Unsupported::Layout);
        }
        if pool < 2 * page || !page.is_power_of_two() {
            return Err(Unsupported::PoolOfOnePage);
        }
        if arena / page > MAX_PAGES {
            return Err(Unsupported::Layout);
        }
        let align = threshold / classes;
        Ok(Geometry {
            arena,
            pool,
            page,
            overhead: HEADER_BYTES.next_multiple_of(align),
            align,
            classes: u32::try_from(classes).map_err(|_| Unsupported::Layout)?,
        })
    }

    /// The address of an arena's first pool: pymalloc starts carving at the first
    /// pool-aligned address.
    pub(crate) fn first_pool(&self, arena: usize) -> usize {
        arena.next_multiple_of(self.pool)
    }

    /// How many pools an arena at `arena` holds.
    pub(crate) fn pools(&self, arena: usize) -> usize {
        (arena + self.arena - self.first_pool(arena)) / self.pool
    }

    /// The size of blocks of a carved pool whose size index is `size_index` and whose
    /// `maxnextoffset` is `max_next`; `None` if the two disagree.
    fn block_size(&self, size_index: u32, max_next: u32) -> Option<usize> {
        let size = if size_index == NO_SIZE_INDEX {
            // Given back: the size the pool had, from the offset that stays.
            self.pool.checked_sub(max_next as usize)?
        } else if size_index < self.classes {
            (size_index as usize + 1) * self.align
        } else {
            return None;
        };
        let fits = size >= self.align
            && size % self.align == 0
            && size <= self.classes as usize * self.align
            && self.pool - size == max_next as usize;
        fits.then_some(size)
    }
}

/// What a pool that passed the checks is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Pool {
    /// Not carved yet: no header, nothing pymalloc keeps in it.
    #[default]
    Uncarved,
    /// Carved, with blocks in use.
    InUse,
    /// Carved, with no block in use: on its arena's list of free pools.
    Free,
}

/// The fields of one pool header.
#[derive(Debug, Clone, Copy)]
struct Header {
    count: u32,
    count_high: u32,
    free_block: usize,
    next_pool: usize,
    arena_index: u32,
    size_index: u32,
    next_offset: u32,
    max_next_offset: u32,
}

impl Header {
    /// Reads the header at `at`.
    ///
    /// # Safety
    /// `at` is the start of a pool inside a mapped arena, which nothing changes while
    /// it is read (the caller holds the interpreter's lock).
    unsafe fn read(at: usize) -> Self {
        let at = at as *const u8;
        // SAFETY: per the contract, 48 readable bytes, 8-aligned (a pool is).
        unsafe {
            Header {
                count: ptr::read_volatile(at.add(COUNT_AT).cast::<u32>()),
                count_high: ptr::read_volatile(at.add(COUNT_HIGH_AT).cast::<u32>()),
                free_block: ptr::read_volatile(at.add(FREE_BLOCK_AT).cast::<usize>()),
                next_pool: ptr::read_volatile(at.add(NEXT_POOL_AT).cast::<usize>()),
                arena_index: ptr::read_volatile(at.add(ARENA_INDEX_AT).cast::<u32>()),
                size_index: ptr::read_volatile(at.add(SIZE_INDEX_AT).cast::<u32>()),
                next_offset: ptr::read_volatile(at.add(NEXT_OFFSET_AT).cast::<u32>()),
                max_next_offset: ptr::read_volatile(at.add(MAX_NEXT_OFFSET_AT).cast::<u32>()),
            }
        }
    }

    fn is_zero(&self) -> bool {
        self.count == 0
            && self.count_high == 0
            && self.free_block == 0
            && self.next_pool == 0
            && self.arena_index == 0
            && self.size_index == 0
            && self.next_offset == 0
            && self.max_next_offset == 0
    }
}

/// Checks the header of the pool at `at`, in the arena at `arena`: what the pool is,
/// or `None` if it breaks a rule (see the module's docs) of the arena's.
fn check(geometry: &Geometry, arena: usize, at: usize, header: &Header) -> Option<Pool> {
    if header.is_zero() {
        return Some(Pool::Uncarved);
    }
    let size = geometry.block_size(header.size_index, header.max_next_offset)?;
    let overhead = geometry.overhead;
    let next = header.next_offset as usize;
    let blocks = (geometry.pool - overhead) / size;
    let carved_right = header.count_high == 0
        && (header.count as usize) <= blocks
        && next >= overhead + 2 * size
        && next <= geometry.pool
        && (next - overhead) % size == 0;
    if !carved_right {
        return None;
    }
    // A free block lies below the next block never handed out, on a block's start.
    let free_block_right = header.free_block == 0
        || (header.free_block >= at + overhead
            && header.free_block < at + next
            && (header.free_block - at - overhead) % size == 0);
    if !free_block_right {
        return None;
    }
    if header.count > 0 {
        // Blocks in use: a pool given back had none.
        return (header.size_index != NO_SIZE_INDEX).then_some(Pool::InUse);
    }
    // A free pool: its last freed block heads its list of free blocks, and it is on its
    // arena's list of free pools.
    let next_pool_right = header.next_pool == 0
        || (header.next_pool % geometry.pool == 0
            && header.next_pool >= geometry.first_pool(arena)
            && header.next_pool < arena + geometry.arena);
    (header.free_block != 0 && next_pool_right).then_some(Pool::Free)
}

/// Checks every pool header of the arena at `arena` (mapped, and unchanged while this
/// reads it: the caller holds the interpreter's lock) and writes what each pool is
/// into `pools`. Returns whether the arena is pymalloc's as far as its headers can
/// tell: its first pool carved, its carved pools a run from the first, each header
/// right, every one with the same arena index.
///
/// # Safety
/// The `geometry.arena` bytes at `arena` are mapped and readable.
pub(crate) unsafe fn check_arena(
    geometry: &Geometry,
    arena: usize,
    pools: &mut [Pool; MAX_POOLS],
) -> bool {
    let count = geometry.pools(arena);
    let mut index = None;
    let mut carving_ended = false;
    for (number, state) in pools.iter_mut().enumerate().take(count) {
        let at = geometry.first_pool(arena) + number * geometry.pool;
        // SAFETY: a pool inside the arena, which the caller guarantees is mapped and
        // unchanged.
        let header = unsafe { Header::read(at) };
        let Some(pool) = check(geometry, arena, at, &header) else {
            return false;
        };
        *state = pool;
        if pool == Pool::Uncarved {
            if number == 0 {
                return false; // pymalloc carves an arena's first pool as it makes it
            }
            carving_ended = true;
            continue;
        }
        if carving_ended || *index.get_or_insert(header.arena_index) != header.arena_index {
            return false;
        }
    }
    true
}

/// Marks a free pool for pymalloc to set up anew before it hands out a block of it.
///
/// # Safety
/// `at` is the start of a pool that [`check_arena`] found free, in an arena proven
/// pymalloc's, and the caller holds the interpreter's lock.
pub(crate) unsafe fn forget_size(at: usize) {
    // SAFETY: per the contract, the header is pymalloc's and no one else writes it now.
    unsafe {
        ptr::write_volatile(
            (at as *mut u8).add(SIZE_INDEX_AT).cast::<u32>(),
            NO_SIZE_INDEX,
        )
    };
}
