//! A scope that takes an arena while another thread frees a result that escaped the
//! arena's previous scope still gives back the pages its own work freed.
//!
//! Freeing the result makes jemalloc purge the idle arena on the freeing thread, and
//! jemalloc skips a purge asked for while another is under way: a scope whose end
//! came while that purge ran would give back nothing of its own. Checked on the
//! scope's own freed pages with `mincore`: they must not be resident once it ends.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use arenapool_alloc::{current_arena, rss, with_arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const ROUNDS: usize = 400;
/// A large size class below jemalloc's `oversize_threshold` (8 MiB): its free goes
/// through the arena's decay purge, which is what skips other purges while it runs.
const RESULT: usize = 6 << 20;
const SCRATCH: usize = 256 << 10;

/// How many of the pages of `[addr, addr + len)` are resident.
fn resident_pages(addr: usize, len: usize) -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let start = addr / page * page;
    let pages = (addr + len - start).div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte per page of the range, which lies in memory this
    // process has mapped (jemalloc keeps freed extents mapped).
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, pages * page, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

#[test]
fn a_scope_gives_back_its_pages_while_a_result_of_its_arena_is_freed() {
    let (to_freer, inbox) = mpsc::channel::<(Vec<u8>, Arc<AtomicBool>)>();
    let freer = std::thread::spawn(move || {
        for (result, freed) in inbox {
            drop(result);
            freed.store(true, Ordering::Release);
        }
    });
    let (mut same_arena, mut kept) = (0, Vec::new());
    for round in 0..ROUNDS {
        let (result, first) = with_arena(|| (vec![1u8; RESULT], current_arena()));
        let freed = Arc::new(AtomicBool::new(false));
        let rss_with_result = rss();
        to_freer.send((result, Arc::clone(&freed))).unwrap();
        // Wait until the purge of the result is under way on the other thread (RSS
        // starts to fall), or over.
        while rss() + (1 << 20) > rss_with_result && !freed.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        // The arena just released is taken again (the recycler hands out the most
        // recently released one), often while that purge still runs.
        let (scratch_at, second) = with_arena(|| {
            let scratch = vec![2u8; SCRATCH];
            (
                std::hint::black_box(&scratch).as_ptr() as usize,
                current_arena(),
            )
        });
        assert!(first.is_some(), "the scope ran without an arena");
        if first != second {
            continue;
        }
        same_arena += 1;
        let resident = resident_pages(scratch_at, SCRATCH);
        if resident > 0 {
            kept.push(format!(
                "round {round}: {resident} pages of the scope's scratch resident"
            ));
        }
    }
    drop(to_freer);
    freer.join().unwrap();
    eprintln!("{same_arena} of {ROUNDS} rounds reused the arena whose result was being freed");
    assert!(
        same_arena > ROUNDS / 2,
        "the recycler did not hand the arena out again"
    );
    assert!(
        kept.is_empty(),
        "{} rounds kept pages:\n{}",
        kept.len(),
        kept.join("\n")
    );
}
