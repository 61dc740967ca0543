//! The `arenapool-4k` contender: the `arenapool` contender with huge pages off, every
//! arena in 4 KiB pages.

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

fn main() -> std::process::ExitCode {
    // Before any arena is made: the pool's, the scopes' and the phases' follow it.
    arenapool_alloc::set_huge_pages(false);
    arenapool_bench::child_main(arenapool_bench::Contender::Arenapool4k)
}
