//! A process's anonymous memory in transparent huge pages: `AnonHugePages` of
//! `/proc/<pid>/smaps_rollup`.
//!
//! Reading that file walks the process's page tables under its memory-map lock, so
//! unlike `statm` it costs time in proportion to the process's size (milliseconds for
//! gigabytes in small pages): the sampler reads it less often the more it costs.

use std::io::Read;

/// Bytes of process `pid`'s anonymous memory mapped by transparent huge pages, or
/// `None` if they cannot be read: the process has exited, or the kernel has no
/// `smaps_rollup` (before Linux 4.14, or not Linux). `buf` holds the file's text; pass
/// the same one every time to save allocating it.
pub(crate) fn anon_huge_of(pid: u32, buf: &mut String) -> Option<usize> {
    buf.clear();
    std::fs::File::open(format!("/proc/{pid}/smaps_rollup"))
        .and_then(|mut f| f.read_to_string(buf))
        .ok()?;
    parse_anon_huge(buf)
}

/// The `AnonHugePages:` figure of an `smaps` or `smaps_rollup` text, in bytes.
fn parse_anon_huge(text: &str) -> Option<usize> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))?;
    let mut words = line.split_whitespace();
    let kib: usize = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_rollup() {
        let rollup = "556c6e408000-7ffd83ce4000 ---p 00000000 00:00 0    [rollup]\n\
                      Rss:                1712 kB\n\
                      Anonymous:           116 kB\n\
                      AnonHugePages:      4096 kB\n\
                      ShmemPmdMapped:        0 kB\n";
        assert_eq!(parse_anon_huge(rollup), Some(4 << 20));
        assert_eq!(parse_anon_huge("AnonHugePages:  0 kB\n"), Some(0));
        for bad in [
            "",
            "Rss: 1712 kB\n",
            "AnonHugePages: x kB\n",
            "AnonHugePages: 4 MB\n",
        ] {
            assert_eq!(parse_anon_huge(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_this_process_and_not_a_dead_one() {
        let mut buf = String::new();
        let own = anon_huge_of(std::process::id(), &mut buf);
        assert!(own.is_some_and(|b| b % 4096 == 0), "{own:?}");
        // Above the kernel's largest process id (4,194,304): no such process.
        assert_eq!(anon_huge_of(u32::MAX, &mut buf), None);
    }
}
