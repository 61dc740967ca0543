//! `RawAlloc`: its blocks are aligned, keep their contents through `realloc` (growing and
//! shrinking across the phase threshold), and are zeroed when asked; `RawAlloc::owns` is
//! true for every one of them, in and out of a phase and on a thread in a scope, and
//! false for the system `malloc`'s memory, the stack, static data and code; growing
//! blocks, and the give-backs of their arenas, leave other memory's bytes as they were.
//! Every assertion holds whether or not a phase is open, so the tests can share the
//! process. (That jemalloc's own arenas are not ours is checked by
//! `phase_scopes_and_pools`, which is alone in its process.)
use std::ptr;
use std::sync::Barrier;

use arenapool::{phase, phase_is_open, phase_threshold, with_arena, RawAlloc};

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const MIB: usize = 1 << 20;

static STATIC_DATA: [u8; 4096] = [7; 4096];

/// Sizes below, at and above the phase threshold, up to 8 MiB.
fn sizes() -> Vec<usize> {
    let t = phase_threshold();
    vec![1, 24, 4096, t - 1, t, t + 1, 100_000, MIB, 8 * MIB + 3]
}

const ALIGNS: [usize; 6] = [1, 8, 16, 64, 4096, 64 << 10];

/// Allocates a block of each size and alignment through `RawAlloc`, checks it is ours
/// and aligned, writes its first and last bytes, frees it.
fn alloc_every_kind() {
    for size in sizes() {
        for align in ALIGNS {
            let zeroed = size % 2 == 1;
            let p = if zeroed {
                RawAlloc::alloc_zeroed(size, align)
            } else {
                RawAlloc::alloc(size, align)
            };
            assert!(!p.is_null(), "{size} bytes aligned to {align}");
            assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}");
            assert!(RawAlloc::owns(p), "{size} bytes aligned to {align}");
            // SAFETY: `p` is a live block of `size` bytes of `RawAlloc`'s, freed once.
            unsafe {
                assert!(RawAlloc::usable_size(p) >= size);
                assert!(
                    RawAlloc::owns(p.add(size - 1)),
                    "the last byte of the block"
                );
                if zeroed {
                    assert_eq!((*p, *p.add(size / 2), *p.add(size - 1)), (0, 0, 0));
                }
                p.write(1);
                p.add(size - 1).write(2);
                RawAlloc::free(p);
            }
        }
    }
}

#[test]
fn owns_every_raw_block_in_and_out_of_phases_and_scopes() {
    alloc_every_kind();
    phase(|| {
        assert!(phase_is_open());
        alloc_every_kind();
    });
    with_arena(|| {
        assert!(arenapool::current_arena().is_some());
        alloc_every_kind();
        phase(alloc_every_kind);
    });
    // On other threads, while a phase is open, one of them in a scope.
    let barrier = Barrier::new(2);
    phase(|| {
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                alloc_every_kind();
            });
            s.spawn(|| {
                with_arena(|| {
                    barrier.wait();
                    alloc_every_kind();
                })
            });
        })
    });
}

#[test]
fn owns_no_other_memory() {
    let on_the_stack = [0u8; 64];
    assert!(!RawAlloc::owns(on_the_stack.as_ptr()));
    assert!(!RawAlloc::owns(STATIC_DATA.as_ptr()));
    assert!(!RawAlloc::owns(ptr::null()));
    assert!(!RawAlloc::owns(usize::MAX as *const u8));
    assert!(!RawAlloc::owns(owns_no_other_memory as *const u8));

    // The system allocator's memory, small and large (the latter `mmap`ped by glibc).
    for size in [16, 4096, 200_000, 4 * MIB] {
        // SAFETY: `malloc` has no preconditions; the block is freed once, below.
        let p = unsafe { libc::malloc(size) }.cast::<u8>();
        assert!(!p.is_null());
        assert!(!RawAlloc::owns(p), "libc::malloc({size})");
        // SAFETY: the last byte of the live block of `size` bytes.
        assert!(!RawAlloc::owns(unsafe { p.add(size - 1) }));
        // SAFETY: `p` came from `malloc` and is freed once.
        unsafe { libc::free(p.cast()) };
    }
}

/// Grows and shrinks a block through `sizes`, checking that the bytes kept across each
/// step are unchanged, and filling what each growth adds.
fn realloc_through(sizes: &[usize], align: usize) {
    let mut size = sizes[0];
    let p = RawAlloc::alloc(size, align);
    assert!(!p.is_null());
    // SAFETY: `p` is a live block of `size` bytes.
    unsafe { p.write_bytes(0xA5, size) };
    let mut p = p;
    for &new_size in &sizes[1..] {
        // SAFETY: `p` is a live block of `RawAlloc`'s allocated with `align`, not used
        // after this call unless it returns null.
        let q = unsafe { RawAlloc::realloc(p, new_size, align) };
        assert!(!q.is_null(), "{size} -> {new_size}");
        assert_eq!(
            q as usize % align,
            0,
            "{size} -> {new_size}: alignment lost"
        );
        assert!(RawAlloc::owns(q), "{size} -> {new_size}");
        let kept = size.min(new_size);
        // SAFETY: `q` is live with at least `new_size >= kept` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(q, kept) };
        assert!(
            bytes.iter().all(|&b| b == 0xA5),
            "{size} -> {new_size}: contents changed"
        );
        if new_size > size {
            // SAFETY: bytes `size..new_size` are inside the grown block.
            unsafe { q.add(size).write_bytes(0xA5, new_size - size) };
        }
        (p, size) = (q, new_size);
    }
    // SAFETY: `p` is a live block of `RawAlloc`'s, freed once.
    unsafe { RawAlloc::free(p) };
}

#[test]
fn realloc_keeps_contents_across_the_threshold() {
    let t = phase_threshold();
    let steps = [
        100,
        t - 1,
        t,
        t + 1,
        4 * MIB,
        t + 1,
        t - 1,
        1000,
        3 * MIB,
        64,
        1,
    ];
    for align in [1, 16, 64, 4096] {
        realloc_through(&steps, align);
        phase(|| realloc_through(&steps, align));
        with_arena(|| realloc_through(&steps, align));
    }
    // Made in a phase, resized after it, and the other way round.
    let p = phase(|| {
        let p = RawAlloc::alloc(t + 1, 64);
        // SAFETY: a fresh block of `t + 1` bytes.
        unsafe { p.write_bytes(3, t + 1) };
        p
    });
    // SAFETY: `p` is a live block of `RawAlloc`'s allocated with alignment 64.
    let p = unsafe { RawAlloc::realloc(p, 2 * MIB, 64) };
    // SAFETY: the first `t + 1` bytes of the live 2 MiB block were kept.
    assert!(unsafe { std::slice::from_raw_parts(p, t + 1) }
        .iter()
        .all(|&b| b == 3));
    // SAFETY: as above, shrunk in a phase.
    let p = phase(|| unsafe { RawAlloc::realloc(p, 100, 64) });
    // SAFETY: the first 100 bytes were kept; then the block is freed once.
    unsafe {
        assert!(std::slice::from_raw_parts(p, 100).iter().all(|&b| b == 3));
        RawAlloc::free(p);
    }
}

#[test]
fn null_and_bad_alignments() {
    // A null `realloc` allocates; a null `free` does nothing.
    // SAFETY: null is allowed.
    let p = unsafe { RawAlloc::realloc(ptr::null_mut(), MIB, 16) };
    assert!(!p.is_null() && RawAlloc::owns(p));
    // SAFETY: `p` is a live block of `RawAlloc`'s; null is allowed.
    unsafe {
        RawAlloc::free(p);
        RawAlloc::free(ptr::null_mut());
    }
    // Size 0 gives a real block of at least 1 byte.
    let p = RawAlloc::alloc(0, 1);
    assert!(!p.is_null() && RawAlloc::owns(p));
    // SAFETY: a live block of `RawAlloc`'s, freed once.
    unsafe { RawAlloc::free(p) };
    // An alignment that is not a power of two is refused with null.
    assert!(RawAlloc::alloc(64, 3).is_null());
    assert!(RawAlloc::alloc_zeroed(64, 48).is_null());
    let p = RawAlloc::alloc(64, 16);
    // SAFETY: `p` is a live block; `realloc` fails and leaves it as it was.
    let q = unsafe { RawAlloc::realloc(p, 128, 24) };
    assert!(q.is_null());
    // SAFETY: `p` is still live after the failed `realloc`; freed once.
    unsafe { RawAlloc::free(p) };
}

#[test]
fn growing_blocks_and_their_give_backs_leave_other_memory_unchanged() {
    // Memory that is not the growing blocks', each byte set: the system `malloc`'s
    // (small, and large enough for glibc to `mmap` it), a `Vec` of the global
    // allocator's, and a private mapping of the test's own. Then blocks are grown,
    // moved, freed and given back, and every one of those bytes is read again.
    let sizes = [16, 4096, 200_000, 4 * MIB];
    let system: Vec<*mut u8> = sizes
        .iter()
        .map(|&size| {
            // SAFETY: `malloc` has no preconditions; the block is freed once, below.
            let p = unsafe { libc::malloc(size) }.cast::<u8>();
            assert!(!p.is_null());
            // SAFETY: `p` holds `size` bytes.
            unsafe { p.write_bytes(0xA5, size) };
            p
        })
        .collect();
    let heap = vec![0x5Au8; 8 * MIB];
    let mapped_len = 16 * MIB;
    // SAFETY: a new private anonymous mapping at an address of the kernel's choosing.
    let mapped = unsafe {
        libc::mmap(
            ptr::null_mut(),
            mapped_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mapped, libc::MAP_FAILED);
    let mapped = mapped.cast::<u8>();
    // SAFETY: the mapping holds `mapped_len` bytes.
    unsafe { mapped.write_bytes(0x3C, mapped_len) };

    // Blocks grown by eighths to 64 MiB and freed, three times: outside phases, each
    // moves to an arena for growing blocks and on within it, and each move out of that
    // arena purges it.
    for _ in 0..3 {
        let mut size = MIB;
        let mut block = RawAlloc::alloc(size, 16);
        assert!(!block.is_null());
        while size < 64 * MIB {
            let grown = size + size / 8;
            // SAFETY: a live block of `RawAlloc`'s, made with this alignment.
            block = unsafe { RawAlloc::realloc(block, grown, 16) };
            assert!(!block.is_null());
            // SAFETY: the block holds at least `grown` bytes.
            unsafe { block.add(size).write_bytes(1, grown - size) };
            size = grown;
        }
        // SAFETY: live, freed once.
        unsafe { RawAlloc::free(block) };
    }
    let _ = arenapool::trim();

    for (&p, &size) in system.iter().zip(&sizes) {
        // SAFETY: `p` is a live block of `size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p, size) };
        assert!(
            bytes.iter().all(|&b| b == 0xA5),
            "libc::malloc({size}) changed"
        );
        // SAFETY: `p` came from `malloc` and is freed once.
        unsafe { libc::free(p.cast()) };
    }
    assert!(heap.iter().all(|&b| b == 0x5A), "a Vec's bytes changed");
    // SAFETY: the mapping is live and `mapped_len` bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(mapped, mapped_len) };
    assert!(
        bytes.iter().all(|&b| b == 0x3C),
        "a private mapping's bytes changed"
    );
    // SAFETY: the mapping is the test's own, unmapped once.
    unsafe { libc::munmap(mapped.cast(), mapped_len) };
}
