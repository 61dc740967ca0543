//! The `glibc-trim` contender: glibc malloc, with `malloc_trim(0)` called at the end of
//! every phase (the child's phase markers do it), as a program that trims by hand does.

#[global_allocator]
static GLOBAL: std::alloc::System = std::alloc::System;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::GlibcTrim)
}
