//! Property test: random sequences of `alloc`, `alloc_zeroed`, `realloc` (growing and
//! shrinking, across `phase_threshold()` too), `dealloc` here and on another thread,
//! sizes 1 B to 4 MiB, alignments up to 64 KiB, while phases open and close, arena
//! bindings nest, and the threshold changes. Every block keeps its contents, zeroed
//! blocks are zero, nothing crashes, and every block of at least the threshold lies
//! where the rules say: in memory of this crate's arenas if it was made (or moved by
//! `realloc`) in a phase or a scope, in jemalloc's own otherwise. One test in the
//! binary: phases are process-wide. CI also runs it with jemalloc's internal assertions
//! on (`--features debug`).
//!
//! `PROPTEST_CASES` sets the number of cases (default 64): slow modes cut cases, never
//! assertions.
use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::sync::Arc;

use arenapool_alloc::{
    current_arena, enter_phase, phase_is_open, phase_threshold, set_phase_threshold, Arena,
    ArenaAlloc, Binding, PhaseGuard, RawAlloc,
};
use proptest::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// A raised threshold some cases switch to.
const RAISED: usize = 256 << 10;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        size: usize,
        align_log2: u32,
        zeroed: bool,
    },
    Realloc {
        pick: usize,
        size: usize,
    },
    Free {
        pick: usize,
    },
    FreeElsewhere {
        pick: usize,
    },
    EnterPhase,
    LeavePhase,
    Bind,
    Unbind,
    RaiseThreshold(bool),
}

/// Sizes on both sides of the default threshold and of the raised one, and near them.
fn size() -> impl Strategy<Value = usize> {
    let t = default_threshold();
    prop_oneof![
        2 => 1usize..=256,
        2 => 257usize..t,
        3 => (t - 64)..=(t + 64),
        3 => t..=(RAISED + 4096),
        1 => (RAISED - 64)..=(RAISED + 64),
        1 => (RAISED + 4096)..=(4 << 20),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), 0u32..=16, any::<bool>())
            .prop_map(|(size, align_log2, zeroed)| Op::Alloc { size, align_log2, zeroed }),
        5 => (any::<usize>(), size()).prop_map(|(pick, size)| Op::Realloc { pick, size }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeElsewhere { pick }),
        2 => Just(Op::EnterPhase),
        2 => Just(Op::LeavePhase),
        1 => Just(Op::Bind),
        1 => Just(Op::Unbind),
        1 => any::<bool>().prop_map(Op::RaiseThreshold),
    ]
}

/// The threshold before any test changes it.
fn default_threshold() -> usize {
    use std::sync::OnceLock;
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(phase_threshold)
}

/// A live block: address, layout, and what its bytes hold (`fill`; 0 for a zeroed
/// block until it grows).
struct Block {
    addr: usize,
    layout: Layout,
    fill: u8,
}

impl Block {
    /// Checks the first and last KiB, and bytes at a prime stride between: on every
    /// page, at a different offset on each.
    fn check(&self, len: usize) {
        let p = self.addr as *const u8;
        let probe = |i: usize| {
            // SAFETY: `i < len <= layout.size()`, inside the live block.
            let b = unsafe { *p.add(i) };
            assert_eq!(b, self.fill, "byte {i} of a {len}-byte block");
        };
        (0..len.min(1024)).for_each(probe);
        (1024..len).step_by(509).for_each(probe);
        (len.saturating_sub(1024).max(1024)..len).for_each(probe);
    }
}

fn free_block(b: Block) {
    b.check(b.layout.size());
    // SAFETY: the block was allocated with this layout and is freed once.
    unsafe { dealloc(b.addr as *mut u8, b.layout) };
}

/// Where the rules put a new block of `size` bytes asked for now by this thread:
/// `Some(true)` in memory of this crate's arenas, `Some(false)` in jemalloc's own,
/// `None` for sizes below the threshold (which a thread's cache may serve from any
/// arena it cached them from).
fn expected_owner(size: usize, bound: bool) -> Option<bool> {
    let large = size >= phase_threshold();
    large.then(|| bound || phase_is_open())
}

fn check_owner(what: &str, addr: usize, size: usize, bound: bool) {
    if let Some(ours) = expected_owner(size, bound) {
        assert_eq!(
            RawAlloc::owns(addr as *const u8),
            ours,
            "{what} of {size} bytes (threshold {}, phase open: {}, bound: {bound})",
            phase_threshold(),
            phase_is_open()
        );
    }
}

fn run(start_in_phase: bool, ops: Vec<Op>) {
    let mut blocks: Vec<Block> = Vec::new();
    let mut phases: Vec<PhaseGuard> = Vec::new();
    // Innermost binding last; each keeps its arena alive.
    let mut bindings: Vec<Binding<'static>> = Vec::new();
    let mut next_fill = 1u8;
    set_phase_threshold(default_threshold()).unwrap();
    if start_in_phase {
        phases.push(enter_phase());
    }
    for op in ops {
        let bound = !bindings.is_empty();
        match op {
            Op::Alloc {
                size,
                align_log2,
                zeroed,
            } => {
                let layout = Layout::from_size_align(size, 1 << align_log2).unwrap();
                // SAFETY: `size >= 1`.
                let p = unsafe {
                    if zeroed {
                        alloc_zeroed(layout)
                    } else {
                        alloc(layout)
                    }
                };
                assert!(!p.is_null());
                assert_eq!(p as usize % layout.align(), 0, "misaligned");
                check_owner("a new block", p as usize, size, bound);
                let mut block = Block {
                    addr: p as usize,
                    layout,
                    fill: 0,
                };
                if zeroed {
                    block.check(size);
                } else {
                    next_fill = next_fill.wrapping_add(1).max(1);
                    // SAFETY: `p` is a fresh block of `size` bytes.
                    unsafe { p.write_bytes(next_fill, size) };
                    block.fill = next_fill;
                }
                blocks.push(block);
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
                // A block resized in place stays wherever it was; a moved one is new.
                if p as usize != b.addr {
                    check_owner("a moved block", p as usize, size, bound);
                }
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
            Op::EnterPhase => {
                let phase = enter_phase();
                assert!(phase.is_open());
                phases.push(phase);
                assert!(phase_is_open());
            }
            Op::LeavePhase => {
                phases.pop();
                assert_eq!(phase_is_open(), !phases.is_empty());
            }
            Op::Bind => {
                let arena = Arc::new(Arena::new().unwrap());
                bindings.push(arena.bind_shared());
                assert_eq!(
                    current_arena(),
                    Some(bindings.last().unwrap().arena_index())
                );
            }
            Op::Unbind => {
                bindings.pop();
                assert_eq!(current_arena(), bindings.last().map(|b| b.arena_index()));
            }
            Op::RaiseThreshold(raise) => {
                let t = if raise { RAISED } else { default_threshold() };
                set_phase_threshold(t).unwrap();
                assert_eq!(phase_threshold(), t);
            }
            _ => {}
        }
    }
    // Free a third with everything still open, a third after the phases end, the rest
    // after leaving the scopes too.
    let after_scopes = blocks.split_off(blocks.len() * 2 / 3);
    let after_phases = blocks.split_off(blocks.len() / 2);
    blocks.into_iter().for_each(free_block);
    phases.clear();
    assert!(!phase_is_open());
    after_phases.into_iter().for_each(free_block);
    bindings.clear();
    assert_eq!(current_arena(), None);
    after_scopes.into_iter().for_each(free_block);
    set_phase_threshold(default_threshold()).unwrap();
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
    fn blocks_keep_their_contents_and_go_where_the_rules_say(
        start_in_phase in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        run(start_in_phase, ops);
    }
}
