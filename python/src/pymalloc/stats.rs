//! pymalloc's own statistics, as `sys._debugmallocstats()` prints them: the sizes of
//! its arenas, pools and blocks in the running interpreter, and how many arenas it has
//! made. `_PyObject_DebugMallocStats` writes them into a memory stream here, not to
//! standard error. It prints them only while pymalloc is the object allocator: under
//! `PYTHONMALLOC=malloc` it prints nothing, and under `PYTHONMALLOC=mimalloc` (3.13 on)
//! mimalloc's figures, which have none of the lines read here.

use std::ffi::{c_char, c_int};
use std::ptr;

extern "C" {
    // Exported by every CPython from 3.3 on (not part of the limited API).
    fn _PyObject_DebugMallocStats(out: *mut libc::FILE) -> c_int;
}

/// The figures of pymalloc's that the give-back of free pools rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Bytes of an arena (`ARENA_SIZE`): "N arenas * 1048576 bytes/arena".
    pub(crate) arena: usize,
    /// Bytes of a pool (`POOL_SIZE`): "N unused pools * 16384 bytes".
    pub(crate) pool: usize,
    /// The largest block, in bytes: "Small block threshold = 512, in 32 size classes."
    pub(crate) threshold: usize,
    /// How many sizes of block there are (the same line).
    pub(crate) classes: usize,
    /// Arenas pymalloc has made since the interpreter started ("# arenas allocated
    /// total").
    pub(crate) arenas_made: usize,
}

/// pymalloc's statistics now; `None` if pymalloc is not the object allocator or its
/// text could not be read. The caller holds the interpreter's lock.
pub(crate) fn read() -> Option<Stats> {
    parse(&text()?)
}

/// What `sys._debugmallocstats()` would print; `None` if nothing was printed.
fn text() -> Option<String> {
    let mut buffer: *mut c_char = ptr::null_mut();
    let mut size: libc::size_t = 0;
    // SAFETY: both out-pointers are valid for the stream's life; the stream is closed
    // below, which sets them.
    let stream = unsafe { libc::open_memstream(&mut buffer, &mut size) };
    if stream.is_null() {
        return None;
    }
    // SAFETY: a valid stream; the caller holds the interpreter's lock, under which
    // CPython reads its allocator's state.
    let printed = unsafe { _PyObject_DebugMallocStats(stream) };
    // SAFETY: the stream opened above, closed once; it leaves `buffer` holding `size`
    // bytes (malloc'd, freed below).
    unsafe { libc::fclose(stream) };
    if buffer.is_null() {
        return None;
    }
    // SAFETY: `buffer` holds `size` bytes written by the stream.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), size) };
    let text = String::from_utf8_lossy(bytes).into_owned();
    // SAFETY: the stream's buffer, allocated with malloc and now ours to free.
    unsafe { libc::free(buffer.cast()) };
    (printed != 0).then_some(text)
}

/// The first whole number in `text` (digits, with thousands separated by commas).
fn number(text: &str) -> Option<usize> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let digits: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The figures of `sys._debugmallocstats()`'s text; `None` if one is missing.
pub(crate) fn parse(text: &str) -> Option<Stats> {
    let (mut arena, mut pool, mut threshold, mut classes, mut arenas_made) =
        (None, None, None, None, None);
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Small block threshold =") {
            // "512, in 32 size classes."
            threshold = number(rest);
            classes = rest.split_once(", in ").and_then(|(_, c)| number(c));
        } else if let Some(rest) = line.strip_prefix("# arenas allocated total") {
            arenas_made = number(rest);
        } else if !line.contains('*') {
            // Neither of the lines below: most lines are the size classes' table.
            continue;
        } else if let Some((label, _)) = line.split_once(" bytes/arena") {
            // "4 arenas * 1048576 bytes/arena     =     4,194,304"
            arena = label.split_once(" * ").and_then(|(_, n)| number(n));
        } else if let Some((_, rest)) = line.split_once(" unused pools * ") {
            // "17 unused pools * 16384 bytes      =       278,528"
            pool = rest.split_once(" bytes").and_then(|(n, _)| number(n));
        }
    }
    Some(Stats {
        arena: arena?,
        pool: pool?,
        threshold: threshold?,
        classes: classes?,
        arenas_made: arenas_made?,
    })
}
