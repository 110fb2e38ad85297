//! The BF16 field split and merge on the GPU (`kernels/gpu/field.cu`), byte-identical to
//! the CPU reference [`bf16_field::split`] / [`bf16_field::merge`]: the memory-bound
//! baseline every codec's throughput is read against.

use cudarc::driver::{CudaView, CudaViewMut, PushKernelArg};

use crate::registry::{Kernel, Module};
use crate::{GpuContext, Result, check_len};

/// The field split/merge module (`kernels/gpu/field.cu`).
pub static FIELD_MODULE: Module = Module::new("kvcodec_field", include_str!("../ptx/field.ptx"));
crate::register_module!(FIELD_MODULE);

/// The kernels of [`FIELD_MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKernel {
    /// `bf16_split(words, exponents, sign_mantissa, n)`.
    Split,
    /// `bf16_merge(exponents, sign_mantissa, words, n)`.
    Merge,
}

impl Kernel for FieldKernel {
    fn module(self) -> &'static Module {
        &FIELD_MODULE
    }
    fn symbol(self) -> &'static str {
        match self {
            FieldKernel::Split => "bf16_split",
            FieldKernel::Merge => "bf16_merge",
        }
    }
}

/// Threads per CTA of both kernels.
const THREADS: u32 = 256;

/// Splits `words.len()` device BF16 words into device exponent and sign+mantissa byte
/// streams (at least as many bytes each), on `gpu`'s stream, without synchronising.
/// Every buffer must start 16-byte aligned (fresh cudarc allocations are).
///
/// # Errors
/// [`crate::Error::Buffer`] when an output is too short or a buffer misaligned;
/// [`crate::Error::Cuda`] on a launch failure.
pub fn split(
    gpu: &GpuContext,
    words: &CudaView<'_, u16>,
    exponents: &mut CudaViewMut<'_, u8>,
    sign_mantissa: &mut CudaViewMut<'_, u8>,
) -> Result<()> {
    let n = words.len();
    check_len("exponents", exponents.len(), n, "bytes")?;
    check_len("sign_mantissa", sign_mantissa.len(), n, "bytes")?;
    let stream = gpu.stream();
    crate::check_aligned("words", crate::device_address(words, stream))?;
    crate::check_aligned("exponents", crate::device_address(exponents, stream))?;
    crate::check_aligned("sign_mantissa", crate::device_address(sign_mantissa, stream))?;
    let f = gpu.function(FieldKernel::Split)?;
    let n64 = n as u64;
    let mut launch = stream.launch_builder(&f);
    launch.arg(words).arg(exponents).arg(sign_mantissa).arg(&n64);
    // SAFETY: bf16_split(words: *const u16, e: *mut u8, sf: *mut u8, n: u64) reads n
    // words and writes n bytes to each output; all three hold at least n and start
    // 16-byte aligned for its 16-byte accesses (checked above).
    unsafe { launch.launch(gpu.grid_stride_config(n / 32 + 8, THREADS)) }?;
    Ok(())
}

/// Merges device exponent and sign+mantissa streams into `words.len()` device words, on
/// `gpu`'s stream, without synchronising. Every buffer must start 16-byte aligned.
///
/// # Errors
/// As [`split`].
pub fn merge(
    gpu: &GpuContext,
    exponents: &CudaView<'_, u8>,
    sign_mantissa: &CudaView<'_, u8>,
    words: &mut CudaViewMut<'_, u16>,
) -> Result<()> {
    let n = words.len();
    check_len("exponents", exponents.len(), n, "bytes")?;
    check_len("sign_mantissa", sign_mantissa.len(), n, "bytes")?;
    let stream = gpu.stream();
    crate::check_aligned("exponents", crate::device_address(exponents, stream))?;
    crate::check_aligned("sign_mantissa", crate::device_address(sign_mantissa, stream))?;
    crate::check_aligned("words", crate::device_address(words, stream))?;
    let f = gpu.function(FieldKernel::Merge)?;
    let n64 = n as u64;
    let mut launch = stream.launch_builder(&f);
    launch.arg(exponents).arg(sign_mantissa).arg(words).arg(&n64);
    // SAFETY: bf16_merge(e, sf, words, n) reads n bytes of each stream and writes n
    // words; lengths and alignment checked above.
    unsafe { launch.launch(gpu.grid_stride_config(n / 32 + 8, THREADS)) }?;
    Ok(())
}

/// Host words -> host `(exponents, sign_mantissa)` through the GPU kernels (uploads,
/// splits, downloads; synchronises).
///
/// # Errors
/// [`crate::Error::Cuda`] on any driver failure.
pub fn split_to_vec(gpu: &GpuContext, words: &[u16]) -> Result<(Vec<u8>, Vec<u8>)> {
    let n = words.len();
    let d_words = gpu.upload(words)?;
    let mut e = gpu.zeros::<u8>(n)?;
    let mut sf = gpu.zeros::<u8>(n)?;
    split(gpu, &d_words.slice(..n), &mut e.slice_mut(..n), &mut sf.slice_mut(..n))?;
    Ok((gpu.download(&e, n)?, gpu.download(&sf, n)?))
}

/// Host streams -> host words through the GPU kernels (synchronises).
///
/// # Errors
/// [`crate::Error::Buffer`] if the streams differ in length; [`crate::Error::Cuda`].
pub fn merge_to_vec(gpu: &GpuContext, exponents: &[u8], sign_mantissa: &[u8]) -> Result<Vec<u16>> {
    let n = exponents.len();
    if sign_mantissa.len() != n {
        return Err(crate::Error::Buffer {
            what: "sign_mantissa",
            why: format!("holds {} bytes, the exponents {n}", sign_mantissa.len()),
        });
    }
    let d_e = gpu.upload(exponents)?;
    let d_sf = gpu.upload(sign_mantissa)?;
    let mut words = gpu.zeros::<u16>(n)?;
    merge(gpu, &d_e.slice(..n), &d_sf.slice(..n), &mut words.slice_mut(..n))?;
    gpu.download(&words, n)
}
