//! `cargo xtask kernels [--check]`: CUDA C in `kernels/<crate>/*.cu` (shared headers in
//! `kernels/common/`) -> committed PTX in `crates/<crate>/ptx/<name>.ptx`, plus
//! `kernels/kernels.lock` with the nvcc version, the flags and a SHA-256 of every source,
//! header and output. First it writes the headers generated from the codecs' Rust
//! constants ([`crate::kernel_constants`]). `build.rs` never calls nvcc: the PTX is
//! committed, and the `lock_is_current` test below checks the lock and the generated
//! headers without nvcc.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use sha2::{Digest, Sha256};

/// nvcc from PyPI, pinned to the device machine's CUDA 13.0 driver: PTX from a newer
/// nvcc fails to load there with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
const NVCC_PACKAGES: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
];
/// `compute_80` PTX is JIT-compiled by the driver for every BF16-capable GPU.
const NVCC_FLAGS: &[&str] = &["-ptx", "-arch=compute_80", "-O3", "-std=c++17", "-Ikernels"];
/// The PTX ISA the pinned nvcc emits; a newer one would not load on the 13.0 driver.
const PTX_VERSION: &str = ".version 9.0";
const PTX_TARGET: &str = ".target sm_80";
const LOCK_PATH: &str = "kernels/kernels.lock";

/// The lock file's content: what the committed PTX was built from.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Lock {
    nvcc: String,
    flags: Vec<String>,
    /// `kernels/...` path -> SHA-256 of every `.cu` and `.cuh`.
    sources: BTreeMap<String, String>,
    /// `crates/<crate>/ptx/...` path -> SHA-256 of the generated PTX.
    outputs: BTreeMap<String, String>,
}

pub(crate) fn run(check: bool) -> anyhow::Result<()> {
    let root = crate::project_root();
    if check {
        check_lock(&root)?;
        outln!("kernels: PTX and {LOCK_PATH} are current")?;
        return Ok(());
    }
    for header in crate::kernel_constants::headers() {
        std::fs::write(root.join(header.path), header.text())?;
    }
    let venv = crate::venv::ensure("nvcc-venv", &[NVCC_PACKAGES])?;
    let cu13 = crate::venv::site_packages(&venv)?.join("nvidia").join("cu13");
    let nvcc = cu13.join("bin").join("nvcc");
    let version = String::from_utf8(Command::new(&nvcc).arg("--version").output()?.stdout)?;
    let version = version.lines().find(|l| l.contains("release")).unwrap_or_default().trim().to_string();
    let mut outputs = BTreeMap::new();
    for (source, output) in kernel_units(&root)? {
        eprintln!("[xtask] nvcc {} -> {}", rel(&root, &source), rel(&root, &output));
        std::fs::create_dir_all(output.parent().expect("ptx/ folder"))?;
        crate::venv::run(
            Command::new(&nvcc).current_dir(&root).args(NVCC_FLAGS).arg("-o").arg(&output).arg(&source).env(
                "PATH",
                format!("{}:{}", cu13.join("bin").display(), std::env::var("PATH").unwrap_or_default()),
            ),
        )?;
        outputs.insert(rel(&root, &output), sha256_file(&output)?);
    }
    let lock = Lock { nvcc: version, flags: flags(), sources: source_hashes(&root)?, outputs };
    std::fs::write(root.join(LOCK_PATH), serde_json::to_string_pretty(&lock)? + "\n")?;
    check_lock(&root)?;
    outln!("kernels: wrote {} PTX files and {LOCK_PATH}", lock.outputs.len())?;
    Ok(())
}

fn flags() -> Vec<String> {
    NVCC_FLAGS.iter().map(|s| s.to_string()).collect()
}

/// Every `kernels/<crate>/<name>.cu` with its output `crates/<crate>/ptx/<name>.ptx`.
fn kernel_units(root: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let mut units = Vec::new();
    for source in files_under(&root.join("kernels"))? {
        if source.extension().is_none_or(|e| e != "cu") {
            continue;
        }
        let krate = source.parent().and_then(Path::file_name).context("kernel without a crate folder")?;
        let stem = source.file_stem().context("kernel file name")?;
        let output = root.join("crates").join(krate).join("ptx").join(stem).with_extension("ptx");
        units.push((source, output));
    }
    Ok(units)
}

fn source_hashes(root: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    files_under(&root.join("kernels"))?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "cu" || e == "cuh"))
        .map(|p| Ok((rel(root, &p), sha256_file(&p)?)))
        .collect()
}

/// Compares the lock with the sources and PTX on disk; needs no nvcc.
fn check_lock(root: &Path) -> anyhow::Result<()> {
    const FIX: &str = "run `cargo xtask kernels` and commit the PTX and lock file";
    for header in crate::kernel_constants::headers() {
        let on_disk = std::fs::read_to_string(root.join(header.path)).unwrap_or_default();
        ensure!(on_disk == header.text(), "{} is not what the Rust constants give: {FIX}", header.path);
    }
    let text =
        std::fs::read_to_string(root.join(LOCK_PATH)).with_context(|| format!("{LOCK_PATH}: {FIX}"))?;
    let lock: Lock = serde_json::from_str(&text).with_context(|| format!("{LOCK_PATH} does not parse"))?;
    ensure!(lock.flags == flags(), "nvcc flags changed since the PTX was built: {FIX}");
    let sources = source_hashes(root)?;
    if lock.sources != sources {
        let changed: Vec<&String> = sources
            .keys()
            .chain(lock.sources.keys())
            .filter(|k| sources.get(*k) != lock.sources.get(*k))
            .collect();
        bail!("kernel sources changed since the PTX was built ({changed:?}): {FIX}");
    }
    let expected: Vec<String> = kernel_units(root)?.iter().map(|(_, o)| rel(root, o)).collect();
    let locked: Vec<String> = lock.outputs.keys().cloned().collect();
    ensure!(expected == locked, "kernel set changed ({expected:?} vs locked {locked:?}): {FIX}");
    for (path, hash) in &lock.outputs {
        let file = root.join(path);
        ensure!(sha256_file(&file)? == *hash, "{path} differs from the lock: {FIX}");
        let ptx = std::fs::read_to_string(&file)?;
        for needle in [PTX_VERSION, PTX_TARGET] {
            if !ptx.lines().any(|l| l.trim() == needle) {
                bail!("{path}: missing `{needle}` (the device driver is CUDA 13.0; targets are compute_80)");
            }
        }
    }
    Ok(())
}

fn files_under(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| d.display().to_string())? {
            let p = entry?.path();
            if p.is_dir() { stack.push(p) } else { out.push(p) }
        }
    }
    out.sort();
    Ok(out)
}

fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    Ok(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).to_string_lossy().replace('\\', "/")
}

#[cfg(test)]
mod tests {
    /// CI's kernel lock check: fails when a `.cu`/`.cuh` changed without regenerating PTX.
    #[test]
    fn lock_is_current() {
        super::check_lock(&crate::project_root()).unwrap();
    }
}
