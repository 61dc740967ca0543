//! The `arenapool-phase` contender: `ArenaAlloc` (jemalloc), with every parallel phase
//! run on a plain rayon pool inside `arenapool_alloc::phase`: large blocks allocated
//! meanwhile go to the phase arenas, whose free pages go back when the phase ends.

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::ArenapoolPhase)
}
