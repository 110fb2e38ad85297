//! The ExANS GPU decoder (PTX from `kernels/exans/exans.cu`), byte-identical to the CPU
//! reference [`crate::decode_cache`].
//!
//! One kernel launch decodes every record of a container: one 256-thread CTA per record,
//! warp w decoding partition w with one rANS lane per thread, a decode table (spec §5.4,
//! packed for the GPU's step) in shared memory, words taken step-major in ascending lane
//! order with ballot/popc (spec §6.2) straight from a per-partition word ring that
//! `cp.async` fills ahead, and each symbol joined with its sign+mantissa byte and written straight into
//! the cache's `[T, H, D]` tensors (concatenated in block order, as
//! [`bf16_field::KvCache::concat_words`] lays them out).
//!
//! **Validation.** [`DeviceIndex::new`] runs the CPU parser over the container index
//! and every record (all the checks of spec §8 and §10 that need no decoding) before
//! anything is launched; an invalid container gets the CPU decoder's exact error. The
//! kernel re-checks every offset it uses, bounds every read by the record, and flags the
//! three decode-time errors (word stream exhausted, final state, unconsumed words) in a
//! device status word; [`decode_cache_host`] then runs the CPU decoder on the same bytes
//! to return its exact [`Error`].
//!
//! **Entry points.** [`decode_device`]: a container already on the device, one launch
//! over every record. [`decode_cache_host`]: upload, decode, read back, blocking (tests,
//! tools). [`host::HostDecoder`]: a container in host memory (page-locked, or staged
//! from pageable memory) into a device cache, cut into chunks of records whose transfer
//! on a copy stream overlaps the decoding of earlier chunks on up to
//! [`host::MAX_LANES`] streams; one host synchronisation at the end
//! ([`host::PendingDecode::finish`]). The kernel takes a record range
//! `[first_record, end_record)` so each chunk launches on its own records.
//!
//! GPU limits (the CPU path has none): the device container must be 16-byte aligned.

use std::ops::Range;
use std::sync::Arc;

use bf16_field::KvCache;
use bf16_field::gpu::{GpuContext, PtxModule};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, LaunchConfig, PushKernelArg,
};

use crate::Error;
use crate::container::{ContainerInfo, container_info, decode_cache};
use crate::record::inspect_record;

pub mod host;

pub use host::{HostContainer, HostDecodeOptions, HostDecoder, PendingDecode};

/// The ExANS PTX module: `exans_decode_records`.
pub const MODULE: PtxModule = PtxModule { name: "exans", ptx: include_str!("../ptx/exans.ptx") };

/// The decode kernel's name in [`MODULE`].
pub const DECODE_KERNEL: &str = "exans_decode_records";
/// Threads per CTA (`EX_THREADS` in the kernel): 8 partitions x 32 lanes.
const THREADS: u32 = 256;
/// Dynamic shared memory per CTA, bytes (`EX_DYNAMIC_SMEM` in the kernel): the 2^12-slot
/// decode table at 4 bytes a slot, then per partition a 2 KiB word ring and a 1 KiB mirror
/// of its first 512 words.
const DYNAMIC_SMEM: u32 = 4096 * 4 + 8 * (2048 + 1024);
/// The largest grid the kernel is launched with; it strides over more records.
const MAX_GRID: usize = i32::MAX as usize;

/// Errors of the GPU path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The container is invalid; the variant is the CPU decoder's, for the same bytes.
    #[error(transparent)]
    Decode(#[from] Error),
    /// The encoder's arguments are invalid; the variant is the CPU encoder's
    /// ([`crate::encode_cache`]) for the same cache and block size.
    #[error(transparent)]
    Encode(Error),
    /// A buffer is too small, the wrong length or misaligned.
    #[error("{what}: {why}")]
    Buffer {
        /// Which buffer.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A decoder option is out of range ([`host::HostDecodeOptions`]).
    #[error("{what}: {why}")]
    Options {
        /// Which option.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The GPU decoder flagged a container the CPU decoder accepts (or the host
    /// validation rejected one the CPU decoder accepts): a bug, never expected.
    #[error("GPU decoder status {status:#x} on a container the CPU decoder accepts")]
    Disagreement {
        /// The kernel's status bits (0 when the host validation disagreed).
        status: u32,
    },
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Cuda(#[from] cudarc::driver::DriverError),
    /// Loading the module failed, or the decoded cache could not be assembled.
    #[error(transparent)]
    Backend(#[from] bf16_field::Error),
}

/// The CPU decoder's error for `container`, which the GPU path found invalid; a
/// [`GpuError::Disagreement`] with `status` if the CPU decoder accepts it.
fn cpu_error(container: &[u8], status: u32) -> GpuError {
    match decode_cache(container) {
        Err(e) => GpuError::Decode(e),
        Ok(_) => GpuError::Disagreement { status },
    }
}

/// Every check [`decode_cache`] makes before it decodes: the container header and index,
/// the allocation bound, each record's shape against the container's, and every record
/// check of spec §10 except the three decode-time ones.
fn validate(container: &[u8]) -> Result<ContainerInfo, Error> {
    let info = container_info(container)?;
    let s = info.shape;
    if s.total_values() > container.len() {
        return Err(Error::Truncated { needed: s.total_values(), got: container.len() });
    }
    for i in 0..info.blocks() {
        let in_block = |e: Error| Error::InBlock { block: i, source: Box::new(e) };
        let record = info.shaped_record(container, i)?;
        inspect_record(record).map_err(in_block)?;
    }
    Ok(info)
}

/// A validated container index, with its record offsets on the device: what
/// [`decode_device`] needs besides the container bytes. Build it once per container
/// (it parses every record header on the host) and reuse it across launches.
pub struct DeviceIndex {
    info: ContainerInfo,
    /// `blocks + 1` record offsets from the container start (`u64`, spec §8).
    offsets: CudaSlice<u64>,
    container_len: usize,
}

impl DeviceIndex {
    /// Validates `container` with the CPU parser (no decoding) and uploads its record
    /// offsets.
    ///
    /// # Errors
    /// [`GpuError::Decode`] with the CPU decoder's exact error for an invalid container;
    /// [`GpuError::Cuda`].
    pub fn new(gpu: &GpuContext, container: &[u8]) -> Result<Self, GpuError> {
        let info = match validate(container) {
            Ok(info) => info,
            // decode_cache decodes blocks in parallel; re-running it keeps its error (and
            // its choice among several bad blocks) exactly.
            Err(_) => return Err(cpu_error(container, 0)),
        };
        let offsets: Vec<u64> = info.offsets.iter().map(|&o| o as u64).collect();
        let offsets = gpu.stream().clone_htod(&offsets)?;
        Ok(DeviceIndex { info, offsets, container_len: container.len() })
    }

    /// The container's header and index.
    pub fn info(&self) -> &ContainerInfo {
        &self.info
    }

    /// The container's length in bytes.
    pub fn container_len(&self) -> usize {
        self.container_len
    }

    /// Values in the decoded cache, `2 L T H D`: the length `out` needs.
    pub fn values(&self) -> usize {
        self.info.shape.total_values()
    }
}

/// Decodes the device container `container` (the bytes [`DeviceIndex::new`] validated,
/// 16-byte aligned) into `out`, the cache's `2L` tensors `[T, H, D]` concatenated in
/// block order (layer 0 K, layer 0 V, ...), in one kernel launch on the context's stream,
/// without synchronising. `status[0]` is zeroed, then left nonzero if a record failed a
/// check in the kernel; `out` is then unspecified. Its bits: 1 a header or section offset
/// that does not check out, 2 an invalid model, 4 an initial state below 2^16, 8 a lane
/// read past its partition's words, 16 a final state other than 2^16, 32 words left over
/// (the last three are the decode-time errors of spec §10 rows 25-27; the host validation
/// of [`DeviceIndex::new`] catches the others first), 64 a launch with another block shape
/// or less dynamic shared memory than the kernel needs (never from this crate's launches).
/// [`decode_cache_host`] and [`host::PendingDecode::finish`] turn a nonzero status into
/// the CPU decoder's error.
///
/// # Errors
/// [`GpuError::Buffer`] for a container of the wrong length or alignment, or an `out`
/// or `status` that is too small; [`GpuError::Cuda`].
pub fn decode_device(
    gpu: &GpuContext,
    container: &CudaView<'_, u8>,
    index: &DeviceIndex,
    out: &mut CudaViewMut<'_, u16>,
    status: &mut CudaSlice<u32>,
) -> Result<(), GpuError> {
    check_buffers(index, container.len(), out.len())?;
    if status.is_empty() {
        return Err(GpuError::Buffer { what: "status", why: "needs one u32".into() });
    }
    let stream = gpu.stream();
    let ptr = container.device_ptr(stream).0;
    if ptr % 16 != 0 {
        return Err(GpuError::Buffer {
            what: "container",
            why: format!("device address {ptr:#x} is not 16-byte aligned"),
        });
    }
    stream.memset_zeros(status)?;
    let f = gpu.function(&MODULE, DECODE_KERNEL)?;
    launch_records(&f, stream, container, index, 0..index.info.blocks(), out, status)
}

/// The checks every decoder entry point makes before launching: a container of the
/// indexed length and an output of at least `2 L T H D` words.
fn check_buffers(index: &DeviceIndex, container_len: usize, out_len: usize) -> Result<(), GpuError> {
    if container_len != index.container_len {
        return Err(GpuError::Buffer {
            what: "container",
            why: format!("{container_len} bytes, the index was built for {}", index.container_len),
        });
    }
    let values = index.values();
    if out_len < values {
        return Err(GpuError::Buffer { what: "out", why: format!("{out_len} words, needs {values}") });
    }
    Ok(())
}

/// Launches `exans_decode_records` (`f`) on `stream` over the records `records` of the
/// device container, without synchronising. The caller has run [`check_buffers`],
/// checked that `container` is 16-byte aligned, `status` holds a word and `records`
/// lies in `0..blocks`. An empty range launches nothing.
fn launch_records(
    f: &CudaFunction,
    stream: &Arc<CudaStream>,
    container: &CudaView<'_, u8>,
    index: &DeviceIndex,
    records: Range<usize>,
    out: &mut CudaViewMut<'_, u16>,
    status: &mut CudaSlice<u32>,
) -> Result<(), GpuError> {
    if records.is_empty() {
        return Ok(());
    }
    let s = index.info.shape;
    // container_info checked every dimension against its u16 header field and the block
    // count against its u32 field.
    let (container_len, first, end) = (index.container_len as u64, records.start as u32, records.end as u32);
    let (layers, kv_heads, head_dim) = (s.layers as u32, s.kv_heads as u32, s.head_dim as u32);
    let (block_tokens, tokens) = (index.info.block_tokens as u32, s.tokens as u64);
    let mut launch = stream.launch_builder(f);
    launch
        .arg(container)
        .arg(&container_len)
        .arg(&index.offsets)
        .arg(&first)
        .arg(&end)
        .arg(&layers)
        .arg(&kv_heads)
        .arg(&head_dim)
        .arg(&block_tokens)
        .arg(&tokens)
        .arg(&mut *out)
        .arg(&mut *status);
    let cfg = LaunchConfig {
        grid_dim: (records.len().clamp(1, MAX_GRID) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: DYNAMIC_SMEM,
    };
    // SAFETY: the arguments match exans_decode_records(container: *const u8, container_len:
    // u64, offsets: *const u64, first_record: u32, end_record: u32, layers, kv_heads,
    // head_dim, block_tokens: u32, tokens: u64, out: *mut u16, status: *mut u32).
    // `container` holds container_len bytes and is 16-byte aligned (checked by the
    // caller); `offsets` holds blocks + 1 entries, each <= container_len (validated on the
    // host, re-checked by the kernel), and first < end <= blocks. The kernel reads only
    // inside the slots of records first..end, after checking every section offset against
    // the slot, and writes only out[g T H D + i B H D + r] for g < 2L, i B + B' <= T,
    // r < B' H D, i.e. below 2 L T H D <= out.len() (checked by the caller), and status[0].
    unsafe { launch.launch(cfg) }?;
    Ok(())
}

/// Host container -> host cache through the GPU: validates on the host, uploads, decodes
/// every record in one launch, reads back. On any error the CPU decoder's exact error is
/// returned.
///
/// # Errors
/// [`GpuError::Decode`] for an invalid container (the CPU decoder's error);
/// [`GpuError::Disagreement`] if the GPU flags a container the CPU accepts;
/// [`GpuError::Cuda`]; [`GpuError::Backend`].
pub fn decode_cache_host(gpu: &GpuContext, container: &[u8]) -> Result<KvCache, GpuError> {
    let index = DeviceIndex::new(gpu, container)?;
    let stream = gpu.stream();
    // A fresh allocation: aligned far beyond 16 bytes.
    let d_container = stream.clone_htod(container)?;
    let values = index.values();
    let mut out: CudaSlice<u16> = stream.alloc_zeros(values.max(1))?;
    let mut status: CudaSlice<u32> = stream.alloc_zeros(1)?;
    decode_device(gpu, &d_container.as_view(), &index, &mut out.as_view_mut(), &mut status)?;
    let status = stream.clone_dtoh(&status)?[0];
    if status != 0 {
        return Err(cpu_error(container, status));
    }
    let mut words = stream.clone_dtoh(&out)?;
    words.truncate(values);
    let s = index.info.shape;
    let per_tensor = s.values_per_tensor();
    let mut keys = Vec::with_capacity(s.layers);
    let mut vals = Vec::with_capacity(s.layers);
    for (t, tensor) in words.chunks_exact(per_tensor).enumerate() {
        if t % 2 == 0 { keys.push(tensor.to_vec()) } else { vals.push(tensor.to_vec()) }
    }
    Ok(KvCache::new(s, keys, vals)?)
}
