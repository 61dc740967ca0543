//! Property test under fault injection (feature `fault-injection`): random sequences of
//! allocations (small and large), frees here and on another thread, scopes, phases and
//! trims, while the calls that give pages back and jemalloc's control calls fail at
//! random, and the mapping of memory for arenas fails at random around each large
//! allocation. Every block keeps its contents; an allocation fails only where mapping
//! was made to fail; `RawAlloc::owns` answers exactly what jemalloc itself says of
//! every live block (its arena is one of this crate's or not); no arena stays checked
//! out once the scopes that took them are gone. One test in the binary: phases and the
//! faults are process-wide.
//!
//! `PROPTEST_CASES` sets the number of cases (default 32).
#![allow(clippy::disallowed_methods)]

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::Arc;

use arenapool_alloc::faults::{self, Fault};
use arenapool_alloc::{live_arenas, try_enter_phase, Arena, ArenaAlloc, RawAlloc};
use proptest::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: usize },
    Free { pick: usize },
    FreeElsewhere { pick: usize },
    EnterScope,
    LeaveScope,
    EnterPhase,
    LeavePhase,
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..=4096).prop_map(|size| Op::Alloc { size }),
        4 => ((64usize << 10)..=(4 << 20)).prop_map(|size| Op::Alloc { size }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeElsewhere { pick }),
        2 => Just(Op::EnterScope),
        2 => Just(Op::LeaveScope),
        1 => Just(Op::EnterPhase),
        1 => Just(Op::LeavePhase),
        1 => Just(Op::Trim),
    ]
}

struct Block {
    addr: usize,
    layout: Layout,
    fill: u8,
}

impl Block {
    fn check(&self) {
        let p = self.addr as *const u8;
        let len = self.layout.size();
        for i in (0..len).step_by(4093).chain([len - 1]) {
            assert_eq!(
                // SAFETY: `i < len`, inside the live block.
                unsafe { *p.add(i) },
                self.fill,
                "byte {i} of a {len}-byte block"
            );
        }
    }
}

fn free(block: Block) {
    block.check();
    // SAFETY: allocated with this layout, freed once.
    unsafe { dealloc(block.addr as *mut u8, block.layout) };
}

/// The arena jemalloc says `addr` lies in (`arenas.lookup`).
fn jemalloc_arena_of(addr: usize) -> u32 {
    let mut ptr = addr as *mut c_void;
    let mut index: u32 = 0;
    let mut len = size_of::<u32>();
    // SAFETY: `arenas.lookup` takes a pointer to a live allocation and reads an
    // `unsigned`; both pointers are valid for their sizes.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arenas.lookup".as_ptr(),
            (&mut index as *mut u32).cast(),
            &mut len,
            (&mut ptr as *mut *mut c_void).cast(),
            size_of::<*mut c_void>(),
        )
    };
    assert_eq!(rc, 0, "arenas.lookup");
    index
}

/// Where `RawAlloc::owns` must agree with jemalloc: every arena from `first_ours` on is
/// one of this crate's (nothing else in this test creates arenas).
fn check_owner(block: &Block, first_ours: u32) {
    let ours = jemalloc_arena_of(block.addr) >= first_ours;
    assert_eq!(
        RawAlloc::owns(block.addr as *const u8),
        ours,
        "a block of {} bytes in arena {}",
        block.layout.size(),
        jemalloc_arena_of(block.addr)
    );
}

fn run(ops: Vec<Op>, seed: u64, first_ours: u32, live_before: usize) {
    faults::fail_randomly(Fault::GiveBack, 2, seed);
    faults::fail_randomly(Fault::Control, 3, seed ^ 0x9e37_79b9);
    // Room enough that no push below reallocates while faults are on.
    let mut blocks: Vec<Block> = Vec::with_capacity(ops.len());
    let mut scopes: Vec<arenapool_alloc::Binding<'static>> = Vec::with_capacity(ops.len());
    let mut phases = Vec::with_capacity(ops.len());
    let mut fill = 1u8;
    for op in ops {
        match op {
            Op::Alloc { size } => {
                let layout = Layout::from_size_align(size, 8).unwrap();
                let large = size >= 64 << 10;
                if large {
                    faults::fail_randomly(Fault::Map, 3, seed.wrapping_add(size as u64));
                }
                // SAFETY: `size >= 1`.
                let p = unsafe { alloc(layout) };
                faults::fail_every(Fault::Map, 0);
                if p.is_null() {
                    assert!(
                        large,
                        "a {size}-byte allocation failed with mapping never made to fail"
                    );
                    continue;
                }
                fill = fill.wrapping_add(1).max(1);
                // SAFETY: a fresh block of `size` bytes.
                unsafe { p.write_bytes(fill, size) };
                let block = Block {
                    addr: p as usize,
                    layout,
                    fill,
                };
                check_owner(&block, first_ours);
                blocks.push(block);
            }
            Op::Free { pick } if !blocks.is_empty() => {
                let block = blocks.swap_remove(pick % blocks.len());
                check_owner(&block, first_ours);
                free(block);
            }
            Op::FreeElsewhere { pick } if !blocks.is_empty() => {
                let block = blocks.swap_remove(pick % blocks.len());
                std::thread::spawn(move || free(block)).join().unwrap();
            }
            Op::EnterScope => {
                // Creating or binding an arena may fail under the faults: then the work
                // runs unscoped.
                if let Ok(arena) = Arena::new() {
                    scopes.push(Arc::new(arena).bind_shared());
                }
            }
            Op::LeaveScope => {
                scopes.pop();
            }
            Op::EnterPhase => {
                if let Ok(phase) = try_enter_phase() {
                    phases.push(phase);
                }
            }
            Op::LeavePhase => {
                phases.pop();
            }
            Op::Trim => {
                let _ = arenapool_alloc::trim();
            }
            _ => {}
        }
        for block in &blocks {
            block.check();
        }
    }
    // Innermost first.
    while scopes.pop().is_some() {}
    phases.clear();
    faults::fail_every(Fault::GiveBack, 0);
    faults::fail_every(Fault::Control, 0);
    for block in blocks {
        check_owner(&block, first_ours);
        free(block);
    }
    // Every scope's arena went back to the free list; the sets made once per process
    // (the phase's, one per CPU) are all that may stay checked out.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        live_arenas() <= live_before + 2 * cpus.max(8),
        "{} arenas checked out, {live_before} before",
        live_arenas()
    );
}

#[test]
fn random_operations_survive_failing_calls() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(32);
    // The first arena of this crate's: every later one has a higher index.
    let first = Arena::new().expect("an arena");
    let first_ours = first.index();
    drop(first);
    let live_before = live_arenas();
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in prop::collection::vec(op(), 1..120), seed in any::<u64>())| {
        run(ops, seed, first_ours, live_before);
    });
    assert!(faults::injected(Fault::Control) > 0 && faults::injected(Fault::GiveBack) > 0);
    assert!(faults::injected(Fault::Map) > 0);
}
