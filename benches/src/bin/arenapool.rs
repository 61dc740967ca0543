//! The `arenapool` contender: `ArenaAlloc` (jemalloc), with every parallel phase run as
//! an `ArenaPool` job whose arena is purged when it ends.

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::Arenapool)
}
