//! 8 threads x 10,000 concurrent scopes, with what one scope allocates freed on another
//! thread inside that thread's own scope: every value intact, arenas recycled (at most
//! one per thread), nothing left bound. Alone in its binary: it counts arenas.
use std::collections::BTreeSet;
use std::sync::mpsc;

use arenapool_alloc::{current_arena, live_arenas, with_arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

const THREADS: usize = 8;
const SCOPES: usize = 10_000;

#[test]
fn concurrent_scopes_with_cross_thread_frees() {
    // Thread t sends what it allocates to thread (t + 1) % THREADS, which checks and
    // frees it inside one of its own scopes.
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..THREADS).map(|_| mpsc::channel::<Vec<String>>()).unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, rx)| {
            let tx = senders[(t + 1) % THREADS].clone();
            std::thread::spawn(move || {
                let mut arenas = BTreeSet::new();
                let mut received = 0;
                for s in 0..SCOPES {
                    let batch = with_arena(|| {
                        arenas.insert(current_arena().expect("bound inside a scope"));
                        (0..8).map(|k| format!("{t}:{s}:{k}")).collect::<Vec<_>>()
                    });
                    tx.send(batch).unwrap();
                    // Free what the previous thread sent, inside a scope of our own.
                    while let Ok(batch) = rx.try_recv() {
                        with_arena(|| check_and_free(batch, (t + THREADS - 1) % THREADS));
                        received += 1;
                    }
                }
                drop(tx);
                for batch in rx {
                    with_arena(|| check_and_free(batch, (t + THREADS - 1) % THREADS));
                    received += 1;
                }
                assert_eq!(current_arena(), None);
                (arenas, received)
            })
        })
        .collect();
    drop(senders);
    let mut all = BTreeSet::new();
    for h in handles {
        let (arenas, received) = h.join().unwrap();
        assert_eq!(received, SCOPES);
        all.extend(arenas);
    }
    eprintln!("{THREADS} threads x {SCOPES} scopes used arenas {all:?}");
    // Each thread holds at most one arena at a time: recycling keeps the total at
    // the number of threads.
    assert!(
        all.len() <= THREADS,
        "{} arenas for {THREADS} threads",
        all.len()
    );
    assert_eq!(live_arenas(), 0);
}

fn check_and_free(batch: Vec<String>, from: usize) {
    assert_eq!(batch.len(), 8);
    let scope = batch[0].split(':').nth(1).unwrap();
    for (k, item) in batch.iter().enumerate() {
        assert_eq!(*item, format!("{from}:{scope}:{k}"));
    }
}
