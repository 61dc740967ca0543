//! Property test: random sequences of alloc / realloc (grow and shrink) / free / free on
//! another thread, sizes 1 B to 4 MiB, alignments up to 4096, inside random nestings of
//! arena bindings. Every block keeps its contents; nothing crashes. CI also runs it with
//! jemalloc's internal assertions on (`--features debug`).
//!
//! `PROPTEST_CASES` sets the number of cases (default 64): slow modes cut cases, never
//! assertions.
use std::alloc::{alloc, dealloc, realloc, Layout};
use std::sync::Arc;

use arenapool_alloc::{current_arena, Arena, ArenaAlloc, Binding};
use proptest::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: usize, align_log2: u32 },
    Realloc { pick: usize, size: usize },
    Free { pick: usize },
    FreeElsewhere { pick: usize },
    Enter,
    Leave,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 1usize..=256,
        3 => 257usize..=(64 << 10),
        1 => (64usize << 10)..=(4 << 20),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), 0u32..=12).prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        3 => (any::<usize>(), size()).prop_map(|(pick, size)| Op::Realloc { pick, size }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => any::<usize>().prop_map(|pick| Op::FreeElsewhere { pick }),
        1 => Just(Op::Enter),
        1 => Just(Op::Leave),
    ]
}

/// A live block: address, layout, and the byte it is filled with.
struct Block {
    addr: usize,
    layout: Layout,
    fill: u8,
}

impl Block {
    /// Checks the first KiB, then one byte every 4 KiB, and the last byte.
    fn check(&self, len: usize) {
        let p = self.addr as *const u8;
        let probe = |i: usize| {
            // SAFETY: `i < len <= layout.size()`, inside the live block.
            let b = unsafe { *p.add(i) };
            assert_eq!(b, self.fill, "byte {i} of a {len}-byte block changed");
        };
        (0..len.min(1024)).for_each(probe);
        (1024..len).step_by(4096).for_each(probe);
        if len > 0 {
            probe(len - 1);
        }
    }
}

fn free_block(b: Block) {
    b.check(b.layout.size());
    // SAFETY: the block was allocated with this layout and is freed once.
    unsafe { dealloc(b.addr as *mut u8, b.layout) };
}

fn run(ops: Vec<Op>) {
    let mut blocks: Vec<Block> = Vec::new();
    // Innermost binding last; each keeps its arena alive.
    let mut bindings: Vec<Binding<'static>> = Vec::new();
    let mut next_fill = 1u8;
    for op in ops {
        match op {
            Op::Alloc { size, align_log2 } => {
                let layout = Layout::from_size_align(size, 1 << align_log2).unwrap();
                // SAFETY: `size >= 1`.
                let p = unsafe { alloc(layout) };
                assert!(!p.is_null());
                assert_eq!(p as usize % layout.align(), 0, "misaligned");
                next_fill = next_fill.wrapping_add(1).max(1);
                // SAFETY: `p` is a fresh block of `size` bytes.
                unsafe { p.write_bytes(next_fill, size) };
                blocks.push(Block {
                    addr: p as usize,
                    layout,
                    fill: next_fill,
                });
            }
            Op::Realloc { pick, size } if !blocks.is_empty() => {
                let i = pick % blocks.len();
                let b = &mut blocks[i];
                let old = b.layout.size();
                b.check(old);
                // SAFETY: the block is live with this layout; `size >= 1`.
                let p = unsafe { realloc(b.addr as *mut u8, b.layout, size) };
                assert!(!p.is_null());
                assert_eq!(p as usize % b.layout.align(), 0, "realloc lost alignment");
                b.addr = p as usize;
                b.layout = Layout::from_size_align(size, b.layout.align()).unwrap();
                b.check(old.min(size));
                if size > old {
                    // SAFETY: bytes `old..size` are inside the grown block.
                    unsafe { p.add(old).write_bytes(b.fill, size - old) };
                }
            }
            Op::Free { pick } if !blocks.is_empty() => {
                free_block(blocks.swap_remove(pick % blocks.len()));
            }
            Op::FreeElsewhere { pick } if !blocks.is_empty() => {
                let b = blocks.swap_remove(pick % blocks.len());
                std::thread::spawn(move || free_block(b)).join().unwrap();
            }
            Op::Enter => {
                let arena = Arc::new(Arena::new().unwrap());
                bindings.push(arena.bind_shared());
                assert_eq!(
                    current_arena(),
                    Some(bindings.last().unwrap().arena_index())
                );
            }
            Op::Leave => {
                bindings.pop();
                assert_eq!(current_arena(), bindings.last().map(|b| b.arena_index()));
            }
            _ => {}
        }
    }
    // Free half inside the remaining bindings, the rest after leaving them all.
    let rest = blocks.split_off(blocks.len() / 2);
    blocks.into_iter().for_each(free_block);
    while bindings.pop().is_some() {}
    assert_eq!(current_arena(), None);
    rest.into_iter().for_each(free_block);
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// SAFETY of the blocks moved to other threads: `Block` holds an address, not a pointer,
// so it is `Send`; each block is freed exactly once, by whichever thread holds it.
proptest! {
    #![proptest_config(config())]

    #[test]
    fn blocks_keep_their_contents(ops in proptest::collection::vec(op(), 1..200)) {
        run(ops);
    }
}
