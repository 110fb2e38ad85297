//! The trace format: every pool operation and its outcome, one line each, so that a
//! device allocator (or this CPU model, [`replay`]) can replay a whole serving run and
//! be checked against the model line by line.
//!
//! The first line is the configuration:
//!
//! ```text
//! kvcodec-pool trace v2 layers=32 chunk_bytes=2097152 private_chunks=8 shared_chunks=1000 page_tokens=16 tail_fill_percent=50 classes=49152,50176,65536
//! ```
//!
//! then one line per operation, `op args => outcome` (locations are
//! `chunk:offset:slot_bytes`, offsets in bytes from the chunk start):
//!
//! | line | operation | outcome |
//! |---|---|---|
//! | `submit E` | [`Pool::submit`] | - |
//! | `complete E` | [`Pool::complete`] | - |
//! | `reserve SEQ PAGES => ok` | [`Pool::reserve`] | `ok` or `err MESSAGE` |
//! | `alloc SEQ LAYER => PAGE C:O:S` | [`Pool::alloc`] | the page id and its location |
//! | `compress PAGE BYTES => moved C:O:S` | [`Pool::compress`] | the new location, or `kept` |
//! | `move PAGE => C:O:S` | [`Pool::move_page`] | the new location |
//! | `release SEQ => N` | [`Pool::release`] | pages freed |
//!
//! Errors appear as `err MESSAGE` in the outcome and must replay to the same message.

use thiserror::Error;

use crate::config::{PoolConfig, SizeClasses};
use crate::pool::Pool;

/// The first word of a trace's configuration line, then the version.
pub const TRACE_MAGIC: &str = "kvcodec-pool trace v2";

/// The most host memory a replay lets a trace's model take: its configuration line's
/// empty pool ([`Pool::model_bytes`]) and, after every line, what the model has grown to
/// ([`Pool::host_bytes`]): 1 GiB, about 20 million chunks of 2 MiB (an H200's whole
/// memory is ~70 thousand), so that a hostile trace cannot exhaust the host.
pub const MAX_REPLAY_MODEL_BYTES: u64 = 1 << 30;

/// A replay that could not parse a line, or got another outcome than the trace's.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayError {
    /// Line `line` (1-based) is not a trace line.
    #[error("trace line {line}: cannot parse {text:?}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// The configuration line is not a valid pool.
    #[error("trace line 1: {source}")]
    Config {
        /// Why the pool refused it.
        source: crate::Error,
    },
    /// The configuration line asks for a pool whose model would take `bytes` of host
    /// memory, or the replayed lines grew it to `bytes`, more than
    /// [`MAX_REPLAY_MODEL_BYTES`].
    #[error("trace line 1: a pool of {bytes} bytes of host state, more than the replay allows ({limit})")]
    TooLarge {
        /// Host bytes the model would allocate ([`Pool::model_bytes`]).
        bytes: u64,
        /// [`MAX_REPLAY_MODEL_BYTES`].
        limit: u64,
    },
    /// Line `line` replayed to another outcome.
    #[error("trace line {line}: expected {expected:?}, the model gave {got:?}")]
    Mismatch {
        /// 1-based line number.
        line: usize,
        /// The trace's line.
        expected: String,
        /// The line the model wrote.
        got: String,
    },
}

/// A trace's configuration line parsed ([`parse_config`]) and bounded for a replay.
///
/// # Errors
/// As [`parse_config`]; [`ReplayError::TooLarge`] past [`MAX_REPLAY_MODEL_BYTES`].
pub(crate) fn replay_config(first: &str) -> Result<PoolConfig, ReplayError> {
    let cfg = parse_config(first)?;
    cfg.validate().map_err(|source| ReplayError::Config { source })?;
    let bytes = Pool::model_bytes(&cfg);
    if bytes > MAX_REPLAY_MODEL_BYTES {
        return Err(ReplayError::TooLarge { bytes, limit: MAX_REPLAY_MODEL_BYTES });
    }
    Ok(cfg)
}

/// The configuration line of a trace of a pool of `cfg`.
pub fn config_line(cfg: &PoolConfig) -> String {
    let classes: Vec<String> = cfg.classes.bytes().iter().map(u32::to_string).collect();
    format!(
        "{TRACE_MAGIC} layers={} chunk_bytes={} private_chunks={} shared_chunks={} page_tokens={} tail_fill_percent={} classes={}",
        cfg.layers,
        cfg.chunk_bytes,
        cfg.private_chunks,
        cfg.shared_chunks,
        cfg.page_tokens,
        cfg.tail_fill_percent,
        classes.join(",")
    )
}

/// Parses a configuration line ([`config_line`]).
///
/// # Errors
/// [`ReplayError::Parse`] for anything else, [`ReplayError::Config`] for an invalid pool.
pub fn parse_config(text: &str) -> Result<PoolConfig, ReplayError> {
    let bad = || ReplayError::Parse { line: 1, text: text.to_string() };
    let rest = text.strip_prefix(TRACE_MAGIC).ok_or_else(bad)?;
    let mut fields = std::collections::HashMap::new();
    for kv in rest.split_whitespace() {
        let (k, v) = kv.split_once('=').ok_or_else(bad)?;
        fields.insert(k, v);
    }
    let num =
        |k: &str| -> Result<u64, ReplayError> { fields.get(k).and_then(|v| v.parse().ok()).ok_or_else(bad) };
    let classes: Vec<u32> = fields
        .get("classes")
        .ok_or_else(bad)?
        .split(',')
        .map(|c| c.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let narrow = |v: u64| u32::try_from(v).map_err(|_| bad());
    Ok(PoolConfig {
        layers: narrow(num("layers")?)?,
        chunk_bytes: num("chunk_bytes")?,
        private_chunks: narrow(num("private_chunks")?)?,
        shared_chunks: narrow(num("shared_chunks")?)?,
        page_tokens: narrow(num("page_tokens")?)?,
        tail_fill_percent: narrow(num("tail_fill_percent")?)?,
        classes: SizeClasses::new(classes).map_err(|source| ReplayError::Config { source })?,
    })
}

/// Replays a whole trace on a fresh CPU pool and checks every outcome; returns the pool
/// as the trace leaves it. The device replay ([`crate::gpu::replay_on_device`]) does the
/// same through [`replay_with`] and mirrors every epoch on the GPU.
///
/// # Errors
/// The first line that does not parse or replays to another outcome;
/// [`ReplayError::TooLarge`] for a configuration past [`MAX_REPLAY_MODEL_BYTES`].
pub fn replay(text: &str) -> Result<Pool, ReplayError> {
    replay_with(text, false, |_, _| Ok(()))
}

/// [`replay`], calling `after(pool, line)` after each operation line has replayed and
/// matched (the pool then holds the line's outcome). With `changes`, the pool records
/// its [`crate::Change`]s from the first operation on (`after` takes them).
///
/// # Errors
/// The first line that does not parse or replays to another outcome (a configuration
/// past [`MAX_REPLAY_MODEL_BYTES`]: [`ReplayError::TooLarge`]), as `E`, or the
/// first error of `after`.
pub fn replay_with<E: From<ReplayError>>(
    text: &str,
    changes: bool,
    mut after: impl FnMut(&mut Pool, &str) -> Result<(), E>,
) -> Result<Pool, E> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().ok_or(ReplayError::Parse { line: 1, text: String::new() })?;
    let mut pool = Pool::new(replay_config(first)?).map_err(|source| ReplayError::Config { source })?;
    pool.record_trace(true);
    pool.record_changes(changes);
    for (line, text) in lines {
        let bad = || ReplayError::Parse { line, text: text.to_string() };
        let op = text.split_once(" => ").map_or(text, |(op, _)| op);
        let words: Vec<&str> = op.split_whitespace().collect();
        let n = |i: usize| -> Result<u64, ReplayError> {
            words.get(i).and_then(|w| w.parse().ok()).ok_or_else(bad)
        };
        let n32 = |i: usize| -> Result<u32, ReplayError> { u32::try_from(n(i)?).map_err(|_| bad()) };
        // Outcomes are compared through the trace line the model writes, errors included.
        let _ = match words.first().copied() {
            Some("submit") => pool.submit(n(1)?).map(drop),
            Some("complete") => pool.complete(n(1)?).map(drop),
            Some("reserve") => pool.reserve(n(1)?, n(2)?).map(drop),
            Some("alloc") => pool.alloc(n(1)?, n32(2)?).map(drop),
            Some("compress") => pool.compress(n32(1)?, n32(2)?).map(drop),
            Some("move") => pool.move_page(n32(1)?).map(drop),
            Some("release") => pool.release(n(1)?).map(drop),
            _ => return Err(bad().into()),
        };
        let got = pool.last_trace_line().unwrap_or_default();
        if got != text {
            return Err(
                ReplayError::Mismatch { line, expected: text.to_string(), got: got.to_string() }.into()
            );
        }
        // One line at a time: what the model keeps would grow with the trace.
        pool.clear_trace();
        // New sequences and id blocks grow the model: a trace stops at the bound (past
        // it by one line's growth at most: one sequence's layer records, which the
        // empty pool's bound already covers).
        let bytes = pool.host_bytes();
        if bytes > MAX_REPLAY_MODEL_BYTES {
            return Err(ReplayError::TooLarge { bytes, limit: MAX_REPLAY_MODEL_BYTES }.into());
        }
        after(&mut pool, text)?;
    }
    pool.record_trace(false);
    Ok(pool)
}
