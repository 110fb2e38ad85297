//! kvcodec's one boundary with the CUDA driver. Every kernel launch in the workspace
//! goes through what this crate provides:
//!
//! * [`Backend`] and [`GpuContext::new`]: the probe (libcuda present, a context on the
//!   device ordinal the caller chooses, compute capability >= 8.0, every registered PTX
//!   module loads), falling back to the CPU with the reason;
//! * [`GpuContext`]: a device and the stream work goes to, kvcodec's own or a caller's
//!   ([`GpuContext::with_stream`], [`GpuContext::with_raw_stream`]);
//! * the typed kernel registry: [`Module`], [`register_module!`], [`Kernel`];
//! * launch helpers ([`launch_config`], [`GpuContext::grid_stride_config`],
//!   [`check_len`], [`check_aligned`]) and the errors [`enum@Error`] and [`GpuError`];
//! * [`DeviceStatus`] and [`StatusCodes`]: a kernel's verdict on its input, turned into
//!   the CPU decoder's exact error;
//! * pinned staging ([`GpuContext::pinned_copy`], [`GpuContext::pinned_staging`]);
//! * event timing with a hold kernel ([`GpuContext::time_runs`], [`timing`]);
//! * the BF16 field split and merge kernels ([`field`]);
//! * the Adler-32 of device values, the codecs' optional checksum ([`integrity`]);
//! * [`GpuCacheCodec`], the GPU counterpart of [`bf16_field::CacheCodec`].
//!
//! cudarc is built with `dynamic-loading`: the same binary runs with and without
//! libcuda, and the probe says why the GPU is not used.

mod codec;
mod context;
mod error;
pub mod field;
pub mod integrity;
mod registry;
mod status;
pub mod timing;

pub use codec::GpuCacheCodec;
pub use context::{Backend, BackendChoice, DeviceInfo, GpuContext, launch_config};
pub use error::{Error, GpuError, Result, check_aligned, check_len};
pub use registry::{Kernel, Module, Registered, registered_modules};
pub use status::{DeviceStatus, StatusCodes, StatusEncoding, StatusValue, cpu_verdict};

/// The device address of a buffer or view, for alignment checks. With event tracking
/// off (as [`GpuContext`] sets it) this records nothing on `stream`.
pub fn device_address<T, B: cudarc::driver::DevicePtr<T>>(
    buffer: &B,
    stream: &cudarc::driver::CudaStream,
) -> u64 {
    buffer.device_ptr(stream).0
}

#[doc(hidden)]
pub use inventory as __inventory;
