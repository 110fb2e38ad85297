//! The ExANS GPU encoder and decoders (PTX from `kernels/exans/exans_encode.cu` and
//! `kernels/exans/exans.cu`), byte-identical to the CPU reference both ways:
//!
//! * [`encode`]: a device cache -> the container bytes of [`crate::encode_cache`], three
//!   kernels pipelined over three streams, no host synchronisation (CUDA-graph
//!   capturable);
//! * [`decode`]: a device container -> a device cache, one launch over every record,
//!   after [`DeviceIndex::new`] validated the container on the host;
//! * [`host`]: a container in host memory -> a device cache, the transfer of later
//!   records overlapped with the decoding of earlier ones.
//!
//! Every kernel launches on the context's stream ([`kvcodec_gpu::GpuContext::stream`]: kvcodec's own
//! or the caller's); work on other streams forks from it and joins back by events.
//! A kernel that finds invalid input sets a bit of [`DECODE_STATUS`], and the host then
//! returns the CPU decoder's exact [`crate::Error`] for the same bytes.

pub mod decode;
pub mod encode;
pub mod host;

use kvcodec_gpu::{Kernel, Module, StatusCodes, StatusEncoding, StatusValue};

pub use decode::{DecodeChecks, DeviceIndex, decode_device, decode_to_cache};
pub use encode::{EncodeWorkspace, encode_device, encode_to_vec, max_container_len};
pub use host::{HostContainer, HostDecodeOptions, HostDecoder, PendingDecode};

/// An error of the ExANS GPU path: the CPU's [`crate::Error`] (for an invalid container,
/// or encoder arguments the CPU encoder rejects too), a GPU error, or a disagreement
/// with the CPU decoder.
pub type GpuError = kvcodec_gpu::GpuError<crate::Error>;

impl From<crate::Error> for GpuError {
    fn from(e: crate::Error) -> Self {
        GpuError::Codec(e)
    }
}

/// The decoder's PTX module (`kernels/exans/exans.cu`).
pub static DECODE_MODULE: Module = Module::new("exans", include_str!("../../ptx/exans.ptx"));
kvcodec_gpu::register_module!(DECODE_MODULE);

/// The encoder's PTX module (`kernels/exans/exans_encode.cu`).
pub static ENCODE_MODULE: Module = Module::new("exans_encode", include_str!("../../ptx/exans_encode.ptx"));
kvcodec_gpu::register_module!(ENCODE_MODULE);

/// The kernels of [`DECODE_MODULE`] and [`ENCODE_MODULE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExansKernel {
    /// One CTA per record of a record range: rANS decode, join, store.
    DecodeRecords,
    /// [`ExansKernel::DecodeRecords`] that also adds the Adler-32 sums of each record's
    /// decoded values to a pair of counters per record (records with checksums).
    DecodeRecordsChecksum,
    /// One CTA per block: centers, model, the 8 partitions' rANS streams.
    EncodeBlocks,
    /// [`ExansKernel::EncodeBlocks`] that also adds the Adler-32 sums of each block's
    /// values to a pair of counters per block (the checksum option, when the block
    /// encoder reads the values in 16-byte chunks).
    EncodeBlocksChecksum,
    /// One CTA: record offsets, container header and index.
    EncodeIndex,
    /// One CTA per record: the record at its offset.
    EncodeRecords,
}

impl Kernel for ExansKernel {
    fn module(self) -> &'static Module {
        match self {
            ExansKernel::DecodeRecords | ExansKernel::DecodeRecordsChecksum => &DECODE_MODULE,
            _ => &ENCODE_MODULE,
        }
    }
    fn symbol(self) -> &'static str {
        match self {
            ExansKernel::DecodeRecords => "exans_decode_records",
            ExansKernel::DecodeRecordsChecksum => "exans_decode_records_checksum",
            ExansKernel::EncodeBlocks => "exans_encode_blocks",
            ExansKernel::EncodeBlocksChecksum => "exans_encode_blocks_checksum",
            ExansKernel::EncodeIndex => "exans_encode_index",
            ExansKernel::EncodeRecords => "exans_encode_records",
        }
    }
}

/// Threads per CTA of every ExANS kernel: 8 partitions x 32 rANS lanes.
pub const THREADS: u32 = (crate::format::PARTITIONS * crate::format::LANES) as u32;

/// What `exans_decode_records` leaves in its status word: a flag per problem. The host
/// validation of [`DeviceIndex::new`] catches every problem but the three decode-time
/// ones of spec §10 (rows 25-27) first, so those are what real corruption shows.
pub const DECODE_STATUS: StatusCodes = StatusCodes {
    encoding: StatusEncoding::Flags,
    values: &[
        StatusValue {
            value: 1,
            name: "LAYOUT",
            meaning: "a header or section offset that does not check out",
        },
        StatusValue { value: 2, name: "MODEL", meaning: "an invalid sparse model" },
        StatusValue { value: 4, name: "STATE_RANGE", meaning: "an initial rANS state below 2^16" },
        StatusValue { value: 8, name: "EXHAUSTED", meaning: "a lane read past its partition's words" },
        StatusValue {
            value: 16,
            name: "FINAL_STATE",
            meaning: "a final rANS state other than 2^16 plus its lane's payload",
        },
        StatusValue { value: 32, name: "UNCONSUMED", meaning: "words left over" },
        StatusValue {
            value: 64,
            name: "LAUNCH",
            meaning: "a launch with another block shape or less dynamic shared memory than the kernel needs",
        },
        StatusValue {
            value: 128,
            name: "CHECKSUM",
            meaning: "a record's decoded values do not give its checksum (set by the host)",
        },
    ],
};

/// The `CHECKSUM` flag of [`DECODE_STATUS`]: the host's verdict on the output's sums.
pub(crate) const CHECKSUM_STATUS: u32 = 128;
const _: () = assert!(
    DECODE_STATUS.values[DECODE_STATUS.values.len() - 1].value == CHECKSUM_STATUS,
    "CHECKSUM_STATUS is the last flag of DECODE_STATUS"
);

/// Where each block's values lie in a cache of `shape` (its `2L` tensors `[T, H, D]`
/// back to back) cut in blocks of `block_tokens`: the runs its checksum covers (spec
/// §3). `shape` and `block_tokens` are valid (a container's or an encoder's).
pub(crate) fn record_runs(
    shape: bf16_field::KvShape,
    block_tokens: usize,
) -> kvcodec_gpu::integrity::RecordRuns {
    let hd = shape.kv_heads * shape.head_dim;
    let blocks = shape.tokens.div_ceil(block_tokens);
    kvcodec_gpu::integrity::RecordRuns {
        groups: 2 * shape.layers,
        blocks,
        group_stride: shape.tokens * hd,
        block_stride: block_tokens * hd,
        last_block: (shape.tokens - (blocks - 1) * block_tokens) * hd,
    }
}
