//! `Plain`: element types a window can hold.

/// Plain data that can live in memory shared between processes: a value of the type is
/// its bytes and nothing more.
///
/// Implemented for the integer and floating-point types, `bool`, and arrays of them. A window's memory is zeroed when it is made and only ever
/// written as `T` values, so what a rank reads is always a valid `T`.
///
/// # Safety
///
/// Implement it only for a type that:
/// - is `Copy` and has no `Drop` (nothing to run when a window goes);
/// - has the all-zero bit pattern as a valid value;
/// - holds no pointers, references or handles: they mean nothing in another process
///   (a `&'static str` is `Copy`, but its address in one rank is garbage in another);
/// - has no interior mutability.
///
/// A `#[repr(C)]` struct of `Plain` fields qualifies.
pub unsafe trait Plain: Copy + Send + Sync + 'static {}

macro_rules! plain {
    ($($t:ty),*) => {
        $(
            // SAFETY: a primitive number or bool: copied by value, no pointers, zero
            // is a valid value.
            unsafe impl Plain for $t {}
        )*
    };
}

plain!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bool);

// SAFETY: an array of plain values is its elements' bytes, and all-zero elements are
// valid.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}
