//! The `glibc` contender: the system allocator (glibc malloc on Linux).

#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::Glibc)
}
