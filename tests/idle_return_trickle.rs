//! Memory dropped outside phases goes back while the process only reads a small file
//! now and then: a buffer of 128 KiB allocated and freed every 10 ms (what CPython 3.14's
//! `open()` takes for every file it reads) is not work for the idle return, and the
//! dropped blocks go back within about its delay. Without that, each buffer put the
//! give-back off again, and jemalloc's decay kept most of them for the whole wait.
//! Alone in its binary: it measures process memory.
use std::time::Duration;

mod common;
use common::MIB;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

fn heap() -> usize {
    arenapool::memory().resident
}

/// A file's read buffer: allocated, written, read and freed.
fn read_a_small_file() -> u8 {
    let buffer = std::hint::black_box(vec![1u8; 128 << 10]);
    buffer[buffer.len() - 1]
}

#[test]
fn memory_dropped_goes_back_while_small_buffers_come_and_go() {
    assert_eq!(arenapool::idle_return(), Some(Duration::from_secs(1)));
    let start = heap();
    // 16 blocks of 8 MiB, written, outside any phase: kept for reuse when dropped.
    let blocks: Vec<Vec<u8>> = (0..16).map(|i| vec![i as u8 + 1; 8 * MIB]).collect();
    let built = heap();
    let made = (built - start) / MIB;
    assert!(made >= 120, "the blocks took {made} MiB");
    drop(blocks);
    // Four times the delay: the give-back comes after one delay and a quarter.
    common::heap_comes_back(start, built, Duration::from_secs(4), || {
        for _ in 0..5 {
            assert_eq!(read_a_small_file(), 1);
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}
