use thiserror::Error;

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
    /// A tensor the KV convention requires is missing from a safetensors file.
    #[error("tensor `{name}` is missing (a KV file holds layer.{{i}}.k and layer.{{i}}.v for every layer)")]
    MissingTensor {
        /// Tensor name.
        name: String,
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
