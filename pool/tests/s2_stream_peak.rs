//! What must be true, 2: S2's streaming map keeps peak memory bounded by its window.
//!
//! 200 inputs, each producing a 6 MiB result, through `map_stream` with a window of 4.
//! Peak RSS (VmHWM) stays within 4 × 6 MiB + 64 MiB of the baseline, where collecting
//! the same results would need 1.2 GiB. Every result arrives, in order, and after the
//! stream RSS is back within 16 MiB of the baseline. The results are below jemalloc's
//! 8 MiB oversize threshold, so it is the arenas that give them back, not jemalloc's
//! eager return of huge blocks.

mod common;

use std::sync::Arc;

use arenapool_alloc::{live_arenas, peak_rss, reset_peak_rss, rss};
use arenapool_pool::ArenaPool;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const INPUTS: usize = 200;
const RESULT: usize = 6 << 20;
const WINDOW: usize = 4;

#[test]
fn s2_stream_peak_is_bounded_by_the_window() {
    let pool = ArenaPool::builder()
        .num_threads(2)
        .stream_window(WINDOW)
        .build()
        .unwrap();
    // State shared by every task, once: 8 MiB, touched.
    let state = Arc::new(vec![3u8; 8 << 20]);

    reset_peak_rss().expect("peak RSS cannot be reset here");
    let baseline = rss();
    let mut seen = 0;
    {
        let state = Arc::clone(&state);
        let stream = pool.map_stream(0..INPUTS, move |i| {
            // Scratch of 1 MiB per task, freed inside it.
            let scratch = vec![(i % 250) as u8 + 1; 1 << 20];
            let mut result = vec![scratch[i] + state[i]; RESULT];
            result[RESULT - 1] = 0;
            (i, result)
        });
        for (i, result) in stream {
            assert_eq!(i, seen, "results out of order");
            assert_eq!(result.len(), RESULT);
            assert_eq!(result[RESULT / 2], (i % 250) as u8 + 4);
            assert_eq!(result[RESULT - 1], 0);
            seen += 1;
        }
    }
    let peak = peak_rss();
    let after = rss();
    let bound = baseline + WINDOW * RESULT + (64 << 20);

    eprintln!("s2_stream_peak: {}", common::show("RSS baseline", baseline));
    eprintln!("s2_stream_peak: {}", common::show("peak RSS", peak));
    eprintln!("s2_stream_peak: {}", common::show("bound", bound));
    eprintln!(
        "s2_stream_peak: {}",
        common::show("RSS after the stream", after)
    );
    eprintln!(
        "s2_stream_peak: {}",
        common::show("a collect would hold", INPUTS * RESULT)
    );
    assert_eq!(seen, INPUTS, "results missing");
    assert_eq!(live_arenas(), 2, "the stream took arenas beyond the pool's");
    assert!(
        peak >= baseline + RESULT,
        "no result was resident: the test measures nothing"
    );
    assert!(peak <= bound, "peak RSS exceeds the window's bound");
    assert!(
        after <= baseline + (16 << 20),
        "the stream's memory was kept"
    );
    assert_eq!(state[0], 3);
}
