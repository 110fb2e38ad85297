//! The errors of the GPU layer, shared by every codec's GPU path.

use thiserror::Error;

/// A GPU failure that is not about the data: no usable device, a driver call that
/// failed, a buffer that is too small or misaligned, or an input past a GPU limit.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// `KVCODEC_BACKEND` (or a `--backend` flag) names no backend.
    #[error("unknown backend `{0}` (expected cpu, cuda or auto)")]
    UnknownBackend(String),
    /// The GPU was asked for but cannot be used; the text names the probe step that
    /// failed (libcuda missing, no device of that ordinal, compute capability < 8.0, a
    /// PTX module that does not load).
    #[error("GPU backend unavailable: {0}")]
    Unavailable(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),
    /// A buffer is too small, misaligned, or belongs to another device.
    #[error("{what}: {why}")]
    Buffer {
        /// Which buffer (the argument's name).
        what: &'static str,
        /// What is wrong, with the numbers.
        why: String,
    },
    /// An option or argument out of its range.
    #[error("{what}: {why}")]
    InvalidArgument {
        /// Which option or argument.
        what: &'static str,
        /// The value and the range.
        why: String,
    },
    /// An input the CPU path takes but the GPU kernels do not (a size past a kernel's
    /// limit); the CPU path is the fallback.
    #[error("not supported on the GPU: {what}: {why}")]
    Unsupported {
        /// Which parameter.
        what: &'static str,
        /// The value and the limit.
        why: String,
    },
}

/// An error of a codec's GPU path: the CPU codec's own error `E`, a GPU [`enum@Error`],
/// or a disagreement between the GPU and the CPU reference.
///
/// Every GPU decoder reports invalid input with exactly the error its CPU decoder gives
/// for the same bytes ([`GpuError::Codec`]), found by running the CPU decoder once a
/// kernel has flagged the input (see [`crate::DeviceStatus::check`]).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GpuError<E> {
    /// The CPU codec's error for the same input: invalid encoded bytes, or encoder
    /// arguments the CPU encoder rejects too.
    #[error(transparent)]
    Codec(E),
    /// No usable GPU, a driver failure, a bad buffer, or an input past a GPU limit.
    #[error(transparent)]
    Gpu(#[from] Error),
    /// A kernel flagged input the CPU decoder accepts: a bug, never expected.
    #[error("GPU status {status:#x} ({meaning}) on input the CPU decoder accepts")]
    Disagreement {
        /// The device status word.
        status: u32,
        /// Its flags or code in words ([`crate::StatusCodes::describe`]).
        meaning: String,
    },
}

impl<E> From<cudarc::driver::DriverError> for GpuError<E> {
    fn from(e: cudarc::driver::DriverError) -> Self {
        GpuError::Gpu(Error::Cuda(e))
    }
}

/// `Result` with the GPU layer's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A [`Error::Buffer`] unless `got >= needed`.
///
/// # Errors
/// [`Error::Buffer`] naming `what`, with both lengths in `unit`s.
pub fn check_len(what: &'static str, got: usize, needed: usize, unit: &str) -> Result<()> {
    if got >= needed {
        Ok(())
    } else {
        Err(Error::Buffer { what, why: format!("holds {got} {unit}, needs {needed}") })
    }
}

/// A [`Error::Buffer`] unless the device address `ptr` is a multiple of 16 bytes: the
/// kernels move 16-byte vectors (`uint4`, `cp.async`).
///
/// # Errors
/// [`Error::Buffer`] naming `what` and the address.
pub fn check_aligned(what: &'static str, ptr: u64) -> Result<()> {
    if ptr.is_multiple_of(16) {
        Ok(())
    } else {
        Err(Error::Buffer { what, why: format!("device address {ptr:#x} is not 16-byte aligned") })
    }
}
