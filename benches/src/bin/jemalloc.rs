//! The `jemalloc` contender: jemalloc with its default configuration.

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::Jemalloc)
}
