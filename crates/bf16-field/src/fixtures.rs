//! Where the workspace's real KV fixtures live (`fixtures/*.safetensors`, written by
//! `cargo xtask fixtures`), for the tests, examples and benches of every crate.
//!
//! `KVCODEC_FIXTURES` overrides the folder: a GPU machine that runs test binaries built
//! elsewhere sets it, since the compiled-in workspace path may not exist there.

use std::path::PathBuf;

use crate::{KvCache, Result};

/// `KVCODEC_FIXTURES` if set, else the `fixtures/` folder of the workspace this crate
/// was built in.
pub fn dir() -> PathBuf {
    std::env::var_os("KVCODEC_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

/// The `*.safetensors` files in [`dir`], sorted; empty when the folder is missing or
/// holds none.
pub fn paths() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "safetensors"));
    paths.sort();
    paths
}

/// Every fixture as `(file stem, cache)`, in [`paths`] order.
///
/// # Errors
/// The first file that does not read as a KV cache ([`crate::io::read_kv_cache`]).
pub fn read_all() -> Result<Vec<(String, KvCache)>> {
    paths()
        .into_iter()
        .map(|p| {
            let name = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
            Ok((name, crate::io::read_kv_cache(&p)?))
        })
        .collect()
}
