//! The `mimalloc-purge0` contender: mimalloc with its purge delay set to 0, so freed
//! memory is purged at once (the child sets the option before the workload starts).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::MimallocPurge0)
}
