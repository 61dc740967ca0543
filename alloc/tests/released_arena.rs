//! An arena that is released while nothing in it is alive still gives back, at once,
//! whatever is freed into it afterwards.
//!
//! Here a thread whose binding was leaked (`mem::forget`) goes on allocating in the
//! arena after the `Arena` is dropped; the same holds for a block whose free, on
//! another thread, is under way at the moment of release. Alone in its binary: it
//! measures RSS.
mod common;

use std::sync::mpsc;

use arenapool_alloc::{current_arena, Arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[test]
fn memory_freed_into_a_released_arena_goes_back() {
    warm_up_thread();
    let (arena_tx, arena_rx) = mpsc::channel();
    let (released_tx, released_rx) = mpsc::channel::<()>();
    let (measured_tx, measured_rx) = mpsc::channel::<()>();
    let before = rss();
    let worker = std::thread::spawn(move || {
        let arena = Arena::new().unwrap();
        std::mem::forget(arena.bind());
        arena_tx.send(arena).unwrap();
        released_rx.recv().unwrap();
        // Still bound to the released arena: 128 MiB in blocks of 1 MiB, touched, then
        // freed, all of it in that arena.
        let blocks: Vec<Vec<u8>> = (0..128).map(|i| vec![i as u8 | 1; MIB]).collect();
        let bound = current_arena();
        let held = rss();
        drop(blocks);
        measured_tx.send(()).unwrap();
        (bound, held)
    });
    let arena = arena_rx.recv().unwrap();
    let index = arena.index();
    drop(arena); // released: nothing in it is alive
    released_tx.send(()).unwrap();
    measured_rx.recv().unwrap();
    let after = rss();
    let (bound, held) = worker.join().unwrap();
    eprintln!(
        "released_arena: before {:.1} MiB; holding +{:.1}; after the free +{:.1}",
        before as f64 / MIB as f64,
        mib_diff(held, before),
        mib_diff(after, before)
    );
    assert_eq!(bound, Some(index), "the thread was not bound to the arena");
    assert!(held > before + 120 * MIB, "the blocks were not resident");
    assert!(
        after <= before + 16 * MIB,
        "memory freed into a released arena stayed resident"
    );
}
