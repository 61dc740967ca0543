//! The `arenapool-huge` contender: the `arenapool` contender with huge pages on.

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

fn main() -> std::process::ExitCode {
    // Before any arena is made: the pool's, the scopes' and the phases' follow it.
    arenapool_alloc::set_huge_pages(true);
    arenapool_bench::child_main(arenapool_bench::Contender::ArenapoolHuge)
}
