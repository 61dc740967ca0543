//! The allocator a hook wraps, as CPython (`PyMemAllocatorEx`) and numpy
//! (`PyDataMemAllocator`) lay it out: a context and four functions.

use std::ffi::c_void;
use std::ptr;

/// `free` of CPython's allocators.
pub(crate) type RawFree = unsafe extern "C" fn(*mut c_void, *mut c_void);
/// `free` of numpy's handlers, which are told the block's size.
pub(crate) type SizedFree = unsafe extern "C" fn(*mut c_void, *mut c_void, usize);

/// An allocator of CPython's or numpy's; `F` is the type of its `free`
/// ([`RawFree`] or [`SizedFree`]), the one place where their layouts differ.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Allocator<F> {
    pub(crate) ctx: *mut c_void,
    pub(crate) malloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    pub(crate) calloc: Option<unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void>,
    pub(crate) realloc:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void>,
    pub(crate) free: Option<F>,
}

/// A `free` function of either kind.
pub(crate) trait Free: Copy {
    /// Calls it.
    ///
    /// # Safety
    ///
    /// `ctx` is its allocator's context; `block` a live block of that allocator's, of
    /// `size` bytes, not used again.
    unsafe fn call(self, ctx: *mut c_void, block: *mut c_void, size: usize);
}

impl Free for RawFree {
    unsafe fn call(self, ctx: *mut c_void, block: *mut c_void, _size: usize) {
        // SAFETY: the caller's contract.
        unsafe { self(ctx, block) }
    }
}

impl Free for SizedFree {
    unsafe fn call(self, ctx: *mut c_void, block: *mut c_void, size: usize) {
        // SAFETY: the caller's contract.
        unsafe { self(ctx, block, size) }
    }
}

impl<F: Free> Allocator<F> {
    /// A new block of `size` bytes (null: none).
    ///
    /// # Safety
    ///
    /// `self` is a live allocator of CPython's or numpy's.
    pub(crate) unsafe fn malloc(&self, size: usize) -> *mut c_void {
        match self.malloc {
            // SAFETY: the allocator's own function and context.
            Some(malloc) => unsafe { malloc(self.ctx, size) },
            None => ptr::null_mut(),
        }
    }

    /// A new zeroed block of `nelem` × `elsize` bytes (null: none).
    ///
    /// # Safety
    ///
    /// As [`Allocator::malloc`].
    pub(crate) unsafe fn calloc(&self, nelem: usize, elsize: usize) -> *mut c_void {
        match self.calloc {
            // SAFETY: the allocator's own function and context.
            Some(calloc) => unsafe { calloc(self.ctx, nelem, elsize) },
            None => ptr::null_mut(),
        }
    }

    /// `block` resized to `size` bytes (null: not resized).
    ///
    /// # Safety
    ///
    /// `block` is a live block of this allocator's.
    pub(crate) unsafe fn realloc(&self, block: *mut c_void, size: usize) -> *mut c_void {
        match self.realloc {
            // SAFETY: the allocator's own function and context, with a block of its own.
            Some(realloc) => unsafe { realloc(self.ctx, block, size) },
            None => ptr::null_mut(),
        }
    }

    /// Frees `block`, `size` bytes long.
    ///
    /// # Safety
    ///
    /// `block` is a live block of this allocator's, not used again.
    pub(crate) unsafe fn free(&self, block: *mut c_void, size: usize) {
        if let Some(free) = self.free {
            // SAFETY: the allocator's own function and context, with a block of its own.
            unsafe { free.call(self.ctx, block, size) }
        }
    }
}
