//! `Plain`: element types a window can hold.

/// Plain data that can live in memory shared between processes: a value of the type is
/// its bytes and nothing more.
///
/// Implemented for the integer and floating-point types and arrays of them. A
/// window's memory is zeroed when it is made; what a rank reads was written by some
/// rank, and since every bit pattern is a valid `T`, it is always a valid `T` (ranks
/// that disagree on `T` are refused when the window is made).
///
/// # Safety
///
/// Implement it only for a type that:
/// - is `Copy` and has no `Drop` (nothing to run when a window goes);
/// - has every bit pattern as a valid value (no `bool`, `char`, enums or
///   `NonZero*`), and no padding;
/// - holds no pointers, references or handles: they mean nothing in another process
///   (a `&'static str` is `Copy`, but its address in one rank is garbage in another);
/// - has no interior mutability.
///
/// A `#[repr(C)]` struct of `Plain` fields with no padding between or after them
/// qualifies.
pub unsafe trait Plain: Copy + Send + Sync + 'static {}

macro_rules! plain {
    ($($t:ty),*) => {
        $(
            // SAFETY: a primitive number: copied by value, no pointers, no padding,
            // every bit pattern a valid value.
            unsafe impl Plain for $t {}
        )*
    };
}

plain!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

// SAFETY: an array of plain values is its elements' bytes, with no padding between
// them, and any bytes make valid elements.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}
