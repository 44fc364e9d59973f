//! The one module with `unsafe`: a raw chunk's bytes exported read-only through the
//! buffer protocol, so `numpy.frombuffer` makes an array that views the mapping itself.
//!
//! A [`ChunkBuffer`] holds the file's bytes (`Arc<Input>`: the mapping, or the file read
//! into memory), so the mapping lives as long as any array made from it: NumPy keeps the
//! exporter (`view->obj`) referenced. The buffer is read-only: NumPy marks the array
//! non-writeable and refuses `flags.writeable = True`, and a request for a writable
//! buffer is refused with `BufferError`.

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use tet_std::input::Input;

/// A read-only window onto a file's bytes (one raw chunk's payload).
#[pyclass(frozen, module = "tetrs._tetrs")]
pub struct ChunkBuffer {
    input: Arc<Input>,
    start: usize,
    len: usize,
}

impl ChunkBuffer {
    /// The window `start .. start + len` of `input`, or `None` when it is out of range.
    pub fn new(input: Arc<Input>, start: usize, len: usize) -> Option<ChunkBuffer> {
        input.bytes().get(start..start.checked_add(len)?)?;
        Some(ChunkBuffer { input, start, len })
    }

    fn bytes(&self) -> &[u8] {
        self.start
            .checked_add(self.len)
            .and_then(|end| self.input.bytes().get(self.start..end))
            .unwrap_or(&[])
    }
}

#[pymethods]
impl ChunkBuffer {
    /// Bytes in the window.
    fn __len__(&self) -> usize {
        self.len
    }

    /// Fills `view` with the window, read-only.
    ///
    /// # Safety
    /// Called by the interpreter with a valid `Py_buffer` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err(
                "a chunk view is read-only: it is the file's mapping (copy it to write)",
            ));
        }
        let bytes = slf.get().bytes();
        let len = isize::try_from(bytes.len())
            .map_err(|_| PyBufferError::new_err("a chunk larger than isize::MAX bytes"))?;
        let ptr = bytes.as_ptr().cast_mut().cast::<std::ffi::c_void>();
        // SAFETY: `view` is the interpreter's buffer to fill. `ptr .. ptr + len` lies in
        // the bytes `slf` holds through its `Arc<Input>`, which neither moves nor frees
        // them while `slf` lives; `PyBuffer_FillInfo` stores `slf` in `view->obj` with a
        // new reference, so `slf` lives until the consumer releases the buffer. The
        // buffer is marked read-only (`readonly = 1`) and writable requests were refused
        // above, so nothing writes through `ptr` into the private read-only mapping.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr, len, 1, flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(PyErr::take(slf.py())
                .unwrap_or_else(|| PyBufferError::new_err("PyBuffer_FillInfo failed")))
        }
    }

    /// Nothing to release: the reference in `view->obj` keeps the bytes.
    ///
    /// # Safety
    /// Called by the interpreter with the buffer it filled.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
