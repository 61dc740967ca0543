//! The `glibc-trim64k` contender: glibc malloc with `M_TRIM_THRESHOLD` set to 64 KiB
//! before the workload starts (what `MALLOC_TRIM_THRESHOLD_=65536` does).

#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::GlibcTrim64k)
}
