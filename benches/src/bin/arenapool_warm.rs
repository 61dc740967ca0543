//! The `arenapool-warm` contender: `ArenaAlloc` (jemalloc), with every parallel phase
//! run as a job of an `ArenaPool` built with `keep_warm`: free pages stay for the next
//! job until the pool has been idle for a second.

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::ArenapoolWarm)
}
