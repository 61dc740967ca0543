//! A process that computes is not idle: memory it dropped outside phases stays for
//! reuse while a thread of its computes, with no large block allocated meanwhile, and
//! goes back once the computing stops. Without that, the idle return gave back, during
//! each stretch of computing, what work that allocates its blocks once per stretch
//! (a random forest's trees, fitted on threads) made again at the next. Alone in its
//! binary: it measures process memory.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::MIB;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

fn heap() -> usize {
    arenapool::memory().resident
}

#[test]
fn memory_dropped_stays_while_the_process_computes_and_goes_back_after() {
    // Rounds of 50 ms: the give-back would come 250 ms after the drop, were the process
    // taken to be idle.
    let delay = Duration::from_millis(200);
    arenapool::set_idle_return(Some(delay));
    let start = heap();
    // 8 blocks of 8 MiB, written, outside any phase: kept for reuse when dropped (below
    // the bound on what arenas outside phases keep free: 64 MiB and three times 8).
    let blocks: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8 + 1; 8 * MIB]).collect();
    let built = heap();
    let made = (built - start) / MIB;
    assert!(made >= 60, "the blocks took {made} MiB");

    let computing = AtomicBool::new(true);
    let lowest = std::thread::scope(|s| {
        // A whole CPU's work, with no allocation: each round of the idle return sees
        // the process's CPU time grow by its length, far above the half it asks for.
        s.spawn(|| {
            let mut x = 1u64;
            while computing.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
        });
        drop(blocks);
        // Seven delays of computing, below the thirty after which computing no longer
        // holds the give-back off: the heap is read at each 20 ms, its lowest kept.
        let began = Instant::now();
        let mut lowest = heap();
        while began.elapsed() < 7 * delay {
            std::thread::sleep(Duration::from_millis(20));
            lowest = lowest.min(heap());
        }
        computing.store(false, Ordering::Relaxed);
        lowest
    });
    assert!(
        lowest >= start + 48 * MIB,
        "the heap fell to {} MiB above its start while the process computed, with {made} \
         MiB dropped: they went back",
        lowest.saturating_sub(start) / MIB
    );
    // Idle now: back within the delay and a quarter; 30 s for a loaded machine.
    common::heap_comes_back(start, built, Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(50))
    });
}
