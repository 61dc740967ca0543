//! What must be true, 6: over random lengths, windows, thread counts and early drops,
//! `map_stream` yields exactly the prefix of the inputs, in order; it never holds more
//! than a window of results, pulls inputs lazily, and frees what it did not yield.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arenapool_pool::ArenaPool;
use proptest::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

#[derive(Default)]
struct Counters {
    pulled: AtomicUsize,
    computed: AtomicUsize,
    live: AtomicUsize,
    most_live: AtomicUsize,
}

/// A result that counts how many of its kind exist.
struct Tracked {
    value: usize,
    _payload: Vec<u8>,
    counters: Arc<Counters>,
}

impl Tracked {
    fn new(value: usize, counters: &Arc<Counters>) -> Self {
        counters.computed.fetch_add(1, Ordering::SeqCst);
        let live = counters.live.fetch_add(1, Ordering::SeqCst) + 1;
        counters.most_live.fetch_max(live, Ordering::SeqCst);
        Tracked {
            value,
            _payload: vec![value as u8 | 1; 1 + value % 4096],
            counters: Arc::clone(counters),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.counters.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn check(
    len: usize,
    endless: bool,
    window: usize,
    threads: usize,
    stop_after: Option<usize>,
) -> Result<(), TestCaseError> {
    let pool = ArenaPool::builder()
        .num_threads(threads)
        .stream_window(window)
        .build()
        .unwrap();
    let counters = Arc::new(Counters::default());
    let inputs = {
        let counters = Arc::clone(&counters);
        (0..if endless { usize::MAX } else { len }).inspect(move |_| {
            counters.pulled.fetch_add(1, Ordering::SeqCst);
        })
    };
    // An endless stream is always dropped early.
    let limit = stop_after.unwrap_or(if endless { len } else { usize::MAX });
    let expected: Vec<usize> = (0..if endless { limit } else { len.min(limit) }).collect();

    let f_counters = Arc::clone(&counters);
    let mut stream = pool.map_stream(inputs, move |i| Tracked::new(i, &f_counters));
    let mut got = Vec::new();
    while got.len() < limit {
        let Some(result) = stream.next() else { break };
        got.push(result.value);
        drop(result);
        prop_assert!(counters.pulled.load(Ordering::SeqCst) <= got.len() + window);
    }
    drop(stream);

    prop_assert_eq!(&got, &expected);
    prop_assert_eq!(counters.live.load(Ordering::SeqCst), 0, "results not freed");
    prop_assert!(counters.most_live.load(Ordering::SeqCst) <= window);
    prop_assert!(counters.pulled.load(Ordering::SeqCst) <= got.len() + window);
    prop_assert!(counters.computed.load(Ordering::SeqCst) <= got.len() + window);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        if cfg!(debug_assertions) { 256 } else { 1024 }
    ))]

    #[test]
    fn map_stream_yields_exactly_the_prefix(
        len in 0usize..300,
        endless in any::<bool>(),
        window in 1usize..9,
        threads in 1usize..4,
        stop_after in proptest::option::of(0usize..320),
    ) {
        check(len, endless, window, threads, stop_after)?;
    }
}
