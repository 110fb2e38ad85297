//! `cargo xtask gpu-bundle`: one folder holding what a GPU machine without a Rust
//! toolchain needs: the release xtask binary, every test binary, the fixtures (and the
//! snapshots and format specs the tests compare with, and the bench JSONs `simulate`
//! reads), a
//! `build-info.json` (the commit and whether the tree was dirty, which the bench's JSON
//! records), and a `run.sh` that runs the GPU tests and the GPU bench with
//! `KVCODEC_REQUIRE_GPU=1` (every test: the GPU ones fail instead of skipping).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

pub(crate) fn run(out: &Path, gpu_only: bool) -> anyhow::Result<()> {
    let root = crate::project_root();
    let out = if out.is_absolute() { out.to_path_buf() } else { root.join(out) };
    // Only an earlier bundle (or an empty folder) is replaced: anything else is the
    // user's, and --out . would otherwise empty the working tree.
    let is_empty = std::fs::read_dir(&out).is_ok_and(|mut d| d.next().is_none());
    anyhow::ensure!(
        !out.exists() || is_empty || out.join("build-info.json").is_file(),
        "{} exists and is not an earlier GPU bundle (no build-info.json): choose another --out",
        crate::shown(&out)
    );
    // Binaries are taken where cargo says it built them (its JSON messages), so a
    // CARGO_TARGET_DIR or a config file's target dir is followed. Both builds run
    // before the old bundle is removed, so a failed build leaves it in place.
    let xtask = executables(&root, &["build", "--release", "-p", "xtask"], false)?
        .into_iter()
        .find(|exe| exe.file_stem().is_some_and(|s| s == "xtask"))
        .context("cargo build reported no xtask binary")?;
    let mut test_binaries = executables(&root, &["test", "--workspace", "--release", "--no-run"], true)?;
    if gpu_only {
        let gpu_tests = gpu_test_names(&root)?;
        // A test binary is named `<file stem>-<hash>`.
        test_binaries.retain(|exe| {
            let name = exe.file_name().unwrap_or_default().to_string_lossy();
            name.rsplit_once('-').is_some_and(|(stem, _)| gpu_tests.iter().any(|t| t == stem))
        });
    }
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(out.join("tests"))?;
    std::fs::create_dir_all(out.join("fixtures"))?;
    std::fs::copy(&xtask, out.join("xtask"))?;
    let mut tests = Vec::new();
    for exe in test_binaries {
        let name = exe.file_name().context("test binary name")?;
        std::fs::copy(&exe, out.join("tests").join(name))?;
        tests.push(name.to_string_lossy().into_owned());
    }
    // What the tests compare with besides the fixtures: the snapshots and the specs.
    for dir in ["crates/splitzip/tests/snapshots", "crates/exans/tests/snapshots", "docs/formats"] {
        std::fs::create_dir_all(out.join(dir))?;
        for entry in std::fs::read_dir(root.join(dir))? {
            let path = entry?.path();
            std::fs::copy(&path, out.join(dir).join(path.file_name().context("file name")?))?;
        }
    }
    // `simulate`'s measured inputs (it reads them under KVCODEC_WORKSPACE).
    std::fs::create_dir_all(out.join("docs/bench"))?;
    for json in [crate::simulate::DEFAULT_BENCH, crate::simulate::DEFAULT_ATTENTION] {
        std::fs::copy(root.join(json), out.join(json))?;
    }
    if !gpu_only {
        for f in crate::fixture_files()? {
            std::fs::copy(&f, out.join("fixtures").join(f.file_name().context("fixture name")?))?;
        }
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
    let (commit, dirty) = crate::git_state().unwrap_or_else(|| ("unknown".into(), false));
    let info = serde_json::json!({ "commit": commit, "dirty": dirty });
    std::fs::write(out.join("build-info.json"), serde_json::to_string_pretty(&info)? + "\n")?;
    let script = "#!/usr/bin/env bash\n\
# Runs kvcodec's GPU tests and GPU bench on a machine with a GPU and no Rust toolchain.\n\
set -euo pipefail\n\
cd \"$(dirname \"$0\")\"\n\
# The bundle mirrors the workspace's snapshots and specs, which the CPU tests compare with.\n\
export KVCODEC_REQUIRE_GPU=1 KVCODEC_FIXTURES=\"${KVCODEC_FIXTURES:-$PWD/fixtures}\" KVCODEC_WORKSPACE=\"$PWD\" INSTA_WORKSPACE_ROOT=\"$PWD\"\n\
for t in tests/*; do echo \"== $t\"; \"$t\" --test-threads=2; done\n\
./xtask-bench.sh \"$@\"\n";
    std::fs::write(out.join("run.sh"), script)?;
    // The bench reads fixtures relative to the bundle, not the workspace.
    let bench = "#!/usr/bin/env bash\n\
# The GPU bench on every fixture; each fixture's JSON goes to results/<fixture>.json.\n\
set -euo pipefail\n\
cd \"$(dirname \"$0\")\"\n\
export KVCODEC_REQUIRE_GPU=1 KVCODEC_FIXTURES=\"${KVCODEC_FIXTURES:-$PWD/fixtures}\"\n\
mkdir -p results\n\
for f in \"$KVCODEC_FIXTURES\"/*.safetensors; do\n\
  ./xtask bench --backend cuda --input \"$f\" --json \"results/$(basename \"$f\" .safetensors).json\" \"$@\"\n\
done\n";
    std::fs::write(out.join("xtask-bench.sh"), bench)?;
    for s in ["run.sh", "xtask-bench.sh"] {
        crate::venv::run(Command::new("chmod").arg("+x").arg(out.join(s)))?;
    }
    let fixtures = if gpu_only { 0 } else { crate::fixture_files()?.len() };
    outln!("gpu-bundle: {} ({} test binaries, {fixtures} fixtures)", crate::shown(&out), tests.len())?;
    if gpu_only {
        outln!("no fixtures in it: set KVCODEC_FIXTURES to the checkout's fixtures/ on the GPU machine")?;
    }
    let name = out.file_name().unwrap_or_default().to_string_lossy();
    outln!("copy the folder to a GPU machine (x86-64 Linux, glibc 2.34+, CUDA 13 driver R580+), then:")?;
    outln!(
        "  bash {name}/run.sh   # every test with KVCODEC_REQUIRE_GPU=1, then the bench: {name}/results/*.json"
    )?;
    Ok(())
}

/// The stems of the test files that use a GPU (`gpu_or_skip`): the workspace crates'
/// `tests/*.rs`.
fn gpu_test_names(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut dirs = vec![root.join("xtask").join("tests")];
    for krate in std::fs::read_dir(root.join("crates"))? {
        dirs.push(krate?.path().join("tests"));
    }
    let mut names = Vec::new();
    for dir in dirs {
        let Ok(files) = std::fs::read_dir(&dir) else { continue };
        for file in files {
            let path = file?.path();
            if path.extension().is_some_and(|e| e == "rs")
                && std::fs::read_to_string(&path)?.contains("gpu_or_skip")
                && let Some(stem) = path.file_stem()
            {
                names.push(stem.to_string_lossy().into_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// The executables `cargo <args> --message-format=json` builds in `root`: test binaries
/// when `test`, else the others. Cargo's error output on failure.
fn executables(root: &Path, args: &[&str], test: bool) -> anyhow::Result<Vec<PathBuf>> {
    let run = Command::new("cargo")
        .current_dir(root)
        .args(args)
        .arg("--message-format=json")
        .output()
        .with_context(|| format!("cargo {}", args.join(" ")))?;
    anyhow::ensure!(
        run.status.success(),
        "cargo {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&run.stderr)
    );
    let mut found = Vec::new();
    for line in String::from_utf8(run.stdout)?.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["reason"] == "compiler-artifact"
            && v["profile"]["test"] == test
            && let Some(exe) = v["executable"].as_str()
        {
            found.push(PathBuf::from(exe));
        }
    }
    Ok(found)
}
