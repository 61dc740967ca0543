//! Shared-memory figures from `/proc`: what a window costs a rank and the node.
//!
//! The MPI library unlinks its shared segments as soon as every rank has mapped them,
//! so they do not show in a listing of `/dev/shm`; they show in the kernel's counters.

/// Shared memory resident on the whole machine, in bytes: `Shmem:` in `/proc/meminfo`
/// (0 where unavailable). Every page of every live window counts once, however many
/// ranks map it.
pub fn node_shmem() -> usize {
    kib_field("/proc/meminfo", "Shmem:") * 1024
}

/// Shared memory this process has resident, in bytes: `RssShmem:` in
/// `/proc/self/status` (0 where unavailable). A window page counts in every rank that
/// has touched it.
pub fn rss_shmem() -> usize {
    kib_field("/proc/self/status", "RssShmem:") * 1024
}

/// Private memory this process has resident (its heap, stacks, copies), in bytes:
/// `RssAnon:` in `/proc/self/status` (0 where unavailable).
pub fn rss_anon() -> usize {
    kib_field("/proc/self/status", "RssAnon:") * 1024
}

fn kib_field(path: &str, key: &str) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| parse_kib(&text, key))
        .unwrap_or(0)
}

fn parse_kib(text: &str, key: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// `bytes` for people: "812.0 KiB", "1.5 GiB".
pub(crate) fn human(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_fields() {
        let meminfo = "MemTotal:       24683656 kB\nShmem:              8952 kB\nShmemHugePages:        0 kB\n";
        assert_eq!(parse_kib(meminfo, "Shmem:"), Some(8952));
        assert_eq!(parse_kib(meminfo, "Cached:"), None);
        let status = "VmRSS:\t   12000 kB\nRssAnon:\t    9000 kB\nRssShmem:\t     800 kB\n";
        assert_eq!(parse_kib(status, "RssShmem:"), Some(800));
        assert_eq!(parse_kib(status, "RssAnon:"), Some(9000));
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(800 * 1024), "800.0 KiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }
}
