//! `cargo xtask gpu-bundle`: one folder holding what a GPU machine without a Rust
//! toolchain needs: the release xtask binary, every test binary, the fixtures, and a
//! `run.sh` that runs the GPU tests and the GPU bench with `KVCODEC_REQUIRE_GPU=1`.

use std::path::Path;
use std::process::Command;

use anyhow::Context;

pub(crate) fn run(out: &Path) -> anyhow::Result<()> {
    let root = crate::project_root();
    let out = if out.is_absolute() { out.to_path_buf() } else { root.join(out) };
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(out.join("tests"))?;
    std::fs::create_dir_all(out.join("fixtures"))?;
    crate::venv::run(Command::new("cargo").current_dir(&root).args(["build", "--release", "-p", "xtask"]))?;
    // Wherever cargo puts its builds (CARGO_TARGET_DIR, a config file): cargo metadata says.
    let xtask = target_dir(&root)?.join("release").join("xtask");
    std::fs::copy(&xtask, out.join("xtask")).with_context(|| format!("copying {}", xtask.display()))?;
    // Test binaries: ask cargo for their paths in its JSON messages.
    let msgs =
        cargo_stdout(&root, &["test", "--workspace", "--release", "--no-run", "--message-format=json"])?;
    let mut tests = Vec::new();
    for line in String::from_utf8(msgs)?.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact" && v["profile"]["test"] == true {
            if let Some(exe) = v["executable"].as_str() {
                let exe = Path::new(exe);
                let name = exe.file_name().context("test binary name")?;
                std::fs::copy(exe, out.join("tests").join(name))?;
                tests.push(name.to_string_lossy().into_owned());
            }
        }
    }
    for f in crate::fixture_files()? {
        std::fs::copy(&f, out.join("fixtures").join(f.file_name().context("fixture name")?))?;
    }
    // Debug info is most of each binary; the bundle travels, so strip it where `strip`
    // exists (binutils), and keep the binaries as they are elsewhere.
    let mut binaries = vec![out.join("xtask")];
    binaries.extend(tests.iter().map(|t| out.join("tests").join(t)));
    if Command::new("strip").arg("--version").output().is_ok() {
        for b in &binaries {
            crate::venv::run(Command::new("strip").arg(b))?;
        }
    }
    let script = "#!/usr/bin/env bash\n\
# Runs kvcodec's GPU tests and GPU bench on a machine with a GPU and no Rust toolchain.\n\
set -euo pipefail\n\
cd \"$(dirname \"$0\")\"\n\
export KVCODEC_REQUIRE_GPU=1 KVCODEC_FIXTURES=\"$PWD/fixtures\"\n\
for t in tests/*; do echo \"== $t\"; \"$t\" gpu --test-threads=1; done\n\
./xtask-bench.sh \"$@\"\n";
    std::fs::write(out.join("run.sh"), script)?;
    // The bench reads fixtures relative to the bundle, not the workspace.
    let bench = "#!/usr/bin/env bash\nset -euo pipefail\ncd \"$(dirname \"$0\")\"\nfor f in fixtures/*.safetensors; do KVCODEC_REQUIRE_GPU=1 ./xtask bench --backend cuda --input \"$f\" \"$@\"; done\n";
    std::fs::write(out.join("xtask-bench.sh"), bench)?;
    for s in ["run.sh", "xtask-bench.sh"] {
        crate::venv::run(Command::new("chmod").arg("+x").arg(out.join(s)))?;
    }
    println!(
        "gpu-bundle: {} ({} test binaries, {} fixtures)",
        out.display(),
        tests.len(),
        crate::fixture_files()?.len()
    );
    println!(
        "run there:  bash {}/run.sh   (GPU tests, then the GPU bench; KVCODEC_REQUIRE_GPU=1)",
        out.file_name().unwrap_or_default().to_string_lossy()
    );
    Ok(())
}

/// The workspace's target directory, as `cargo metadata` reports it.
fn target_dir(root: &Path) -> anyhow::Result<std::path::PathBuf> {
    let meta = cargo_stdout(root, &["metadata", "--format-version=1", "--no-deps"])?;
    let v: serde_json::Value = serde_json::from_slice(&meta)?;
    let dir = v["target_directory"].as_str().context("cargo metadata: no target_directory")?;
    Ok(dir.into())
}

/// Runs `cargo <args>` in `root` and returns its standard output; its standard error on
/// failure.
fn cargo_stdout(root: &Path, args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let run = Command::new("cargo")
        .current_dir(root)
        .args(args)
        .output()
        .with_context(|| format!("cargo {}", args[0]))?;
    anyhow::ensure!(
        run.status.success(),
        "cargo {} failed:\n{}",
        args[0],
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(run.stdout)
}
