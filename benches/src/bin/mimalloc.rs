//! The `mimalloc` contender: mimalloc with its default configuration.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::Mimalloc)
}
