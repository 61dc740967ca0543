//! The `tcmalloc` contender: TCMalloc with its default configuration (built only with
//! the suite's `tcmalloc` feature).

#[global_allocator]
static GLOBAL: tcmalloc_better::TCMalloc = tcmalloc_better::TCMalloc;

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::Tcmalloc)
}
