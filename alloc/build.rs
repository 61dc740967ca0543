//! Tells the crate whether jemalloc is built with settings of its own: the value of
//! `JEMALLOC_SYS_WITH_MALLOC_CONF`, or of the same name prefixed with the target (as
//! `X86_64_UNKNOWN_LINUX_GNU_JEMALLOC_SYS_WITH_MALLOC_CONF`), which `tikv-jemalloc-sys`'s
//! build compiles in. `jemalloc_settings_given` then answers yes without asking jemalloc.

use std::env;

fn main() {
    let target = env::var("TARGET")
        .unwrap_or_default()
        .to_uppercase()
        .replace('-', "_");
    let mut given = false;
    for name in [
        format!("{target}_JEMALLOC_SYS_WITH_MALLOC_CONF"),
        "JEMALLOC_SYS_WITH_MALLOC_CONF".into(),
    ] {
        println!("cargo:rerun-if-env-changed={name}");
        given |= env::var_os(&name).is_some_and(|value| !value.is_empty());
    }
    println!("cargo:rustc-check-cfg=cfg(jemalloc_built_with_settings)");
    if given {
        println!("cargo:rustc-cfg=jemalloc_built_with_settings");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
