use thiserror::Error;

use crate::KvShape;
use crate::io::{KvLayout, TensorList};

/// Errors of the shared BF16 field, layout and tensor I/O layer.
///
/// Every variant carries the numbers that went wrong, so a caller can report them
/// without re-deriving them.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// Two slices that must hold one entry per BF16 value have different lengths.
    #[error("length mismatch: {what} holds {got} values, expected {expected}")]
    LengthMismatch {
        /// Which buffer was wrong.
        what: &'static str,
        /// Its length in values.
        got: usize,
        /// The length it must have, in values.
        expected: usize,
    },
    /// A KV shape has a zero dimension or its element count overflows `usize`.
    #[error(
        "invalid KV shape {layers} layers x {kv_heads} heads x {head_dim} head_dim x {tokens} tokens: {why}"
    )]
    InvalidShape {
        /// L.
        layers: usize,
        /// H.
        kv_heads: usize,
        /// D.
        head_dim: usize,
        /// T.
        tokens: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A block or page index past the end of the cache.
    #[error("block {index} out of range: the cache has {count} blocks of {block_tokens} tokens")]
    BlockOutOfRange {
        /// The requested block index.
        index: usize,
        /// Blocks in the cache (the last one may be partial).
        count: usize,
        /// Block size B in tokens.
        block_tokens: usize,
    },
    /// A tensor in a safetensors file has the wrong dtype.
    #[error("tensor `{name}`: dtype {dtype}, expected BF16")]
    WrongDtype {
        /// Tensor name.
        name: String,
        /// The dtype found, as safetensors spells it.
        dtype: String,
    },
    /// A tensor in a safetensors file has the wrong shape.
    #[error("tensor `{name}`: shape {got:?}, expected {expected}")]
    WrongTensorShape {
        /// Tensor name.
        name: String,
        /// The shape found.
        got: Vec<usize>,
        /// What was expected, in words.
        expected: String,
    },
    /// No tensor of a safetensors file follows a KV layout the loaders read
    /// ([`crate::io`]'s module docs list them).
    #[error(
        "no KV cache layout recognized: expected BF16 tensors `layer.{{i}}.k` and `layer.{{i}}.v` of shape [T, H, D] \
         for layers i = 0..L (or transformers' `model.layers.{{i}}.self_attn.k_cache` / `v_cache`, or vLLM's \
         `kv_cache.{{i}}` of shape [num_blocks, 2, block_size, H, D]; bf16_field::io lists every layout); \
         the file holds {tensors}"
    )]
    UnrecognizedLayout {
        /// Every tensor of the file.
        tensors: TensorList,
    },
    /// Two tensors of one file follow two different layouts (or two namings of one).
    #[error("tensors `{first}` and `{second}` follow two different KV layouts; a KV file holds one")]
    MixedLayouts {
        /// A tensor of the first naming (in name order).
        first: String,
        /// A tensor of another naming.
        second: String,
    },
    /// Tensors that are no part of the file's layout: kvcodec reads every tensor of a
    /// KV file or rejects the file, so no data is dropped silently.
    #[error("a KV file in the {layout} also holds tensors that are no part of it: {tensors}")]
    UnexpectedTensors {
        /// The layout of the file's other tensors.
        layout: KvLayout,
        /// The tensors that follow no name of it.
        tensors: TensorList,
    },
    /// A gap in a file's layer numbers: layers run 0..L.
    #[error(
        "layer {layer} is missing, but `{next}` follows it: a KV file numbers its layers 0..L without gaps"
    )]
    MissingLayer {
        /// The first layer number without a tensor.
        layer: usize,
        /// A tensor of the next layer the file holds.
        next: String,
    },
    /// A layer's K without its V or V without its K (a file with no V tensor at all is a
    /// keys-only cache instead).
    #[error("`{present}` has no partner `{missing}`: every layer of a KV file holds K and V")]
    UnpairedTensor {
        /// The tensor the file holds.
        present: String,
        /// The partner it lacks.
        missing: String,
    },
    /// A keys-only cache where K and V are needed.
    #[error(
        "the file holds K only (L = {} layers, each [T, H, D] = [{}, {}, {}]; no V): a keys-only (MLA latent) cache, \
         which the whole-cache codecs do not take; bf16_field::io::read_kv_file reads it, and SplitZip's \
         payload API encodes its words",
        .shape.layers, .shape.tokens, .shape.kv_heads, .shape.head_dim
    )]
    KeysOnly {
        /// Its dimensions (L, H, D, T).
        shape: KvShape,
    },
    /// A transformers `[batch, H, T, D]` tensor of another batch than 1.
    #[error("tensor `{name}`: batch {batch}, expected 1 (a KV file holds one sequence: [1, H, T, D])")]
    BatchNotOne {
        /// Tensor name.
        name: String,
        /// The batch size found.
        batch: usize,
    },
    /// More tokens requested of a paged cache than its blocks hold.
    #[error(
        "{tokens} tokens requested, the paged cache's {blocks} blocks of {block_size} tokens hold {capacity}"
    )]
    TokensExceedCapacity {
        /// T requested.
        tokens: usize,
        /// Slots of the blocks read: `blocks x block_size`.
        capacity: usize,
        /// Blocks read (the block table's length, or every block).
        blocks: usize,
        /// Tokens per block.
        block_size: usize,
    },
    /// A block table entry past the paged cache's blocks.
    #[error("block table entry {position} is block {block}, the paged cache has {blocks} blocks")]
    BlockTableOutOfRange {
        /// The entry's position in the table.
        position: usize,
        /// The block index it holds.
        block: usize,
        /// Blocks in the cache.
        blocks: usize,
    },
    /// A block listed twice in a block table.
    #[error("block table lists block {block} twice, at positions {first} and {second}")]
    BlockTableRepeat {
        /// The block index.
        block: usize,
        /// Its first position.
        first: usize,
        /// Its second position.
        second: usize,
    },
    /// [`LoadOptions`](crate::io::LoadOptions) other than the default for a file that is
    /// not paged.
    #[error("load options (tokens, block table) describe a paged cache; this file is in the {layout}")]
    OptionsNotApplicable {
        /// The file's layout.
        layout: KvLayout,
    },
    /// The safetensors container itself could not be parsed or written.
    #[error("safetensors: {0}")]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
