//! The phase-marker protocol: what a child prints on stdout, one message a line.
//!
//! ```text
//! PHASE <name> <rss bytes> <microseconds since the start marker>
//! CHECK <checksum, hex>
//! HUGE <bytes in transparent huge pages>
//! ```
//!
//! Every workload prints a `start` phase first (after its setup) and ends with the
//! phase whose RSS is "RSS after the phase". The child then prints its checksum and,
//! where the kernel tells it, its anonymous memory in huge pages at its end: the
//! runner's sampler cannot read that of a child that exits before the sampler's first
//! reading. Any other line is ignored by the runner, so a contender that prints
//! something of its own does not break the protocol.

use std::fmt;
use std::io::Write;
use std::time::{Duration, Instant};

/// One message from a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A phase has ended.
    Phase(Marker),
    /// The workload's result checksum: equal for every contender, or a contender
    /// computed something else.
    Check(u64),
    /// The child's anonymous memory in transparent huge pages (`AnonHugePages`) at its
    /// end, after its last phase, read by the child itself.
    Huge(usize),
}

/// The end of one phase, as the child measured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The phase's name (no whitespace).
    pub name: String,
    /// The child's RSS in bytes, read by the child itself when the phase ended.
    pub rss: usize,
    /// Time from the `start` marker to this one.
    pub elapsed: Duration,
}

impl Message {
    /// Parses one line of a child's stdout; `None` for a line that is not a message.
    pub fn parse(line: &str) -> Option<Message> {
        let mut words = line.split_whitespace();
        let message = match words.next()? {
            "PHASE" => {
                let name = words.next()?.to_owned();
                let rss = words.next()?.parse().ok()?;
                let elapsed = Duration::from_micros(words.next()?.parse().ok()?);
                Message::Phase(Marker { name, rss, elapsed })
            }
            "CHECK" => Message::Check(u64::from_str_radix(words.next()?, 16).ok()?),
            "HUGE" => Message::Huge(words.next()?.parse().ok()?),
            _ => return None,
        };
        match words.next() {
            None => Some(message),
            Some(_) => None,
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Phase(m) => write!(f, "PHASE {} {} {}", m.name, m.rss, m.elapsed.as_micros()),
            Message::Check(sum) => write!(f, "CHECK {sum:016x}"),
            Message::Huge(bytes) => write!(f, "HUGE {bytes}"),
        }
    }
}

/// The child side: prints phase markers, timed from the `start` marker.
#[derive(Debug)]
pub(crate) struct Phases {
    started: Instant,
}

impl Phases {
    /// Prints the `start` marker.
    pub(crate) fn start() -> Phases {
        let phases = Phases {
            started: Instant::now(),
        };
        phases.mark("start");
        phases
    }

    /// Prints the end of phase `name`, with the RSS now, after the contender's
    /// end-of-phase action (`malloc_trim` for `glibc-trim`), which counts in the time.
    pub(crate) fn end(&self, name: &str) {
        crate::tuning::at_phase_end();
        self.mark(name);
    }

    fn mark(&self, name: &str) {
        debug_assert!(!name.is_empty() && !name.contains(char::is_whitespace));
        let marker = Marker {
            name: name.to_owned(),
            rss: arenapool_alloc::rss(),
            elapsed: self.started.elapsed(),
        };
        emit(&Message::Phase(marker));
    }
}

/// Prints a message on its own line and flushes, so the runner sees it at once.
pub(crate) fn emit(message: &Message) {
    let mut out = std::io::stdout().lock();
    // A closed pipe means the runner is gone; nothing is left to tell.
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_lines_round_trip() {
        let m = Message::Phase(Marker {
            name: "dropped".to_owned(),
            rss: 12_345_678,
            elapsed: Duration::from_micros(1_500_042),
        });
        let line = m.to_string();
        assert_eq!(line, "PHASE dropped 12345678 1500042");
        assert_eq!(Message::parse(&line), Some(m));
        let c = Message::Check(0xdead_beef_0042);
        assert_eq!(c.to_string(), "CHECK 0000deadbeef0042");
        assert_eq!(Message::parse(&c.to_string()), Some(c));
        let h = Message::Huge(4 << 20);
        assert_eq!(h.to_string(), "HUGE 4194304");
        assert_eq!(Message::parse(&h.to_string()), Some(h));
    }

    #[test]
    fn tolerates_whitespace_and_rejects_garbage() {
        assert_eq!(
            Message::parse("  PHASE run\t1024 7 \r"),
            Some(Message::Phase(Marker {
                name: "run".to_owned(),
                rss: 1024,
                elapsed: Duration::from_micros(7),
            }))
        );
        for bad in [
            "",
            "hello",
            "PHASE",
            "PHASE run",
            "PHASE run 12",
            "PHASE run -12 5",
            "PHASE run 12 5 extra",
            "PHASE run 1.5 5",
            "phase run 12 5",
            "CHECK",
            "CHECK xyz",
            "CHECK 12 13",
            "HUGE",
            "HUGE -1",
            "HUGE 2.5",
            "HUGE 12 kB",
        ] {
            assert_eq!(Message::parse(bad), None, "{bad:?}");
        }
    }
}
