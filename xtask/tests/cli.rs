//! The xtask binary as a user runs it: a closed stdout ends a command cleanly, an error
//! is one `error: ...` line that says each thing once and no backtrace, paths are shown
//! without `..`, and the KV loader is the strict one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A fresh folder for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("xtask-cli-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A small real-looking KV file here, named `name`.
    fn kv_file(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        bf16_field::io::write_kv_cache(&path, &kvcodec_testkit::kv_like(2, 2, 16, 32, 5), None).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `xtask args` in `cwd` with RUST_BACKTRACE=1 (which must not add a backtrace).
fn xtask(cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.current_dir(cwd).args(args).env("RUST_BACKTRACE", "1").env("KVCODEC_BACKEND", "cpu");
    cmd
}

/// The error line of a failed run: its last line on stderr, after only the `[bench]`
/// style progress lines.
fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected a failure; stderr: {stderr}");
    let mut lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with('[')).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr}");
    assert!(stderr.ends_with(&format!("{}\n", lines[0])), "the error comes last: {stderr}");
    assert!(!stderr.contains("acktrace") && !stderr.contains("panicked"), "{stderr}");
    let line = lines.remove(0);
    assert!(line.starts_with("error: "), "{line}");
    line.to_string()
}

#[test]
fn stats_into_a_closed_pipe_ends_cleanly() {
    let dir = Scratch::new("pipe");
    let input = dir.kv_file("kv.safetensors");
    // The read end is closed before xtask starts, so its first write to stdout fails, as
    // under `cargo xtask stats | head -1` once head has its line.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = xtask(&dir.0, &["stats", "--input", input.to_str().unwrap()])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn errors_are_one_line_that_says_each_cause_once() {
    let dir = Scratch::new("errors");
    let input = dir.kv_file("kv.safetensors");
    let missing = "No such file or directory";
    let args =
        ["calibrate", "--codec", "splitzip", "--input", input.to_str().unwrap(), "--out", "no-dir/cb.json"];
    let line = error_line(&xtask(&dir.0, &args).output().unwrap());
    assert!(line.starts_with("error: --out no-dir/cb.json: No such file"), "{line}");
    assert_eq!(line.matches(missing).count(), 1, "{line}");
    let line = error_line(&xtask(&dir.0, &["stats", "--input", "gone.safetensors"]).output().unwrap());
    assert!(line.starts_with("error: gone.safetensors: No such file"), "{line}");
    assert_eq!(line.matches(missing).count(), 1, "{line}");
    std::fs::write(dir.0.join("bad.json"), "{}").unwrap();
    let bench = ["bench", "--input", "kv.safetensors", "--codec", "splitzip", "--calibration", "bad.json"];
    let line = error_line(&xtask(&dir.0, &bench).args(["--runs", "1", "--warmup", "0"]).output().unwrap());
    assert!(line.contains("--calibration bad.json: codebook JSON: missing field"), "{line}");
    assert_eq!(line.matches("missing field").count(), 1, "{line}");
}

#[test]
fn calibrate_gaac_writes_a_bases_file() {
    let dir = Scratch::new("calibrate-gaac");
    let input = dir.kv_file("kv.safetensors");
    let args = ["calibrate", "--codec", "gaac", "--input", input.to_str().unwrap(), "--out", "bases.json"];
    let out = xtask(&dir.0, &args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bases = gaac::Bases::load(dir.0.join("bases.json")).unwrap();
    let shape = bf16_field::io::read_kv_cache(&input).unwrap().shape();
    bases.check_shape(shape).unwrap();
    let line = error_line(
        &xtask(&dir.0, &["calibrate", "--codec", "nope", "--input", "x", "--out", "y"]).output().unwrap(),
    );
    assert!(line.contains("the calibrated codecs are: splitzip, gaac"), "{line}");
}

#[test]
fn stats_shows_the_input_without_dot_steps() {
    let dir = Scratch::new("shown");
    dir.kv_file("kv.safetensors");
    std::fs::create_dir(dir.0.join("sub")).unwrap();
    let out = xtask(&dir.0.join("sub"), &["stats", "--input", "../sub/../kv.safetensors"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let first = stdout.lines().next().unwrap();
    let expected = dir.0.canonicalize().unwrap().join("kv.safetensors");
    assert!(first.starts_with(&format!("{}: 2 layers", expected.display())), "{first}");
}

#[test]
fn stats_reads_strictly() {
    let dir = Scratch::new("strict");
    let path = dir.kv_file("gap.safetensors");
    // Layer 1 renamed to layer 9 in the header (same length, so every offset holds):
    // the file has layers 0 and 9, which the old loader read as one layer.
    let mut bytes = std::fs::read(&path).unwrap();
    let header_len = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..header_len].to_vec()).unwrap().replace("layer.1.", "layer.9.");
    bytes.splice(8..header_len, header.into_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let line = error_line(&xtask(&dir.0, &["stats", "--input", "gap.safetensors"]).output().unwrap());
    assert!(
        line.starts_with("error: gap.safetensors: layer 1 is missing, but `layer.9.k` follows it"),
        "{line}"
    );
}

#[test]
fn cpu_bench_times_both_zipfusion_variants_and_gaac() {
    let dir = Scratch::new("cpu-bench");
    let path = dir.0.join("kv64.safetensors");
    bf16_field::io::write_kv_cache(&path, &kvcodec_testkit::kv_like(1, 1, 64, 40, 3), None).unwrap();
    let input = path.to_str().unwrap();
    let out =
        xtask(&dir.0, &["cpu-bench", "--input", input, "--runs", "1", "--warmup", "0"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    for codec in ["zipfusion ", "zipfusion-zero ", "gaac "] {
        assert_eq!(stdout.lines().filter(|l| l.starts_with(codec)).count(), 2, "1 and all threads: {stdout}");
    }
    let wrong = xtask(&dir.0, &["cpu-bench", "--codec", "exans"]).output().unwrap();
    assert_eq!(error_line(&wrong), "error: --codec exans: expected one of zipfusion, zipfusion-zero, gaac");
}
