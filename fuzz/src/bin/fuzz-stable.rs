//! The stable fixed-seed fuzz driver: runs every target of `kvcodec_fuzz::targets` on its
//! seeds (encoded from the fixtures, plus the files in `fuzz/seeds/<target>/`) and then
//! on `--iterations` mutations of them drawn from a fixed-seed generator. No nightly, no
//! libFuzzer: this is what CI runs (docs/fuzzing.md).
//!
//! ```text
//! cargo run --release --no-default-features --features driver --bin fuzz-stable -- \
//!     [--iterations N] [--seed S] [--target NAME]... [--max-input-ms MS] [--replay FILE]...
//! ```
//!
//! A panic or an input slower than `--max-input-ms` is a failure: the input is written to
//! `fuzz/artifacts/stable/`, and the driver exits 1 after the remaining targets.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kvcodec_fuzz::mutate::{Rng, input};
use kvcodec_fuzz::{seeds, targets};

struct Options {
    iterations: usize,
    seed: u64,
    targets: Vec<String>,
    max_input: Duration,
    replay: Vec<PathBuf>,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        iterations: 20_000,
        seed: u64::from_be_bytes(*b"\0kvcodec"),
        targets: Vec::new(),
        max_input: Duration::from_millis(2_000),
        replay: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--iterations" => o.iterations = value()?.parse().map_err(|e| format!("--iterations: {e}"))?,
            "--seed" => o.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--target" => o.targets.push(value()?),
            "--max-input-ms" => {
                o.max_input =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--max-input-ms: {e}"))?)
            }
            "--replay" => o.replay.push(value()?.into()),
            "-h" | "--help" => {
                return Err("usage: fuzz-stable [--iterations N] [--seed S] [--target NAME]... \
                            [--max-input-ms MS] [--replay FILE]..."
                    .into());
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    for t in &o.targets {
        if targets::target(t).is_none() {
            let names: Vec<&str> = targets::TARGETS.iter().map(|(n, _)| *n).collect();
            return Err(format!("unknown target {t}; targets: {}", names.join(" ")));
        }
    }
    Ok(o)
}

/// Runs one input; `Err` with the reason on a panic or a slow input.
fn run_one(body: fn(&[u8]), data: &[u8], max: Duration) -> Result<(), String> {
    let start = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| body(data)));
    let took = start.elapsed();
    match result {
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(format!("panicked: {message}"))
        }
        Ok(()) if took > max => Err(format!("took {took:?} (limit {max:?})")),
        Ok(()) => Ok(()),
    }
}

fn save_failure(target: &str, what: &str, data: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts/stable");
    let path = dir.join(format!("{target}-{what}"));
    if std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, data)).is_err() {
        eprintln!("  (could not write {})", path.display());
    }
    path
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // Panics are caught and reported per input; keep their default messages quiet.
    std::panic::set_hook(Box::new(|_| {}));
    let chosen: Vec<targets::Target> = if options.targets.is_empty() {
        targets::TARGETS.to_vec()
    } else {
        options.targets.iter().filter_map(|t| targets::target(t)).collect()
    };

    if !options.replay.is_empty() {
        let mut failed = 0;
        for path in &options.replay {
            let Ok(data) = std::fs::read(path) else {
                eprintln!("cannot read {}", path.display());
                return ExitCode::from(2);
            };
            for &(name, body) in &chosen {
                match run_one(body, &data, options.max_input) {
                    Ok(()) => println!("{name} {}: ok", path.display()),
                    Err(why) => {
                        failed += 1;
                        println!("{name} {}: {why}", path.display());
                    }
                }
            }
        }
        return if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }

    let total = Instant::now();
    let (mut passed, mut failed) = (0, 0);
    for &(name, body) in &chosen {
        let start = Instant::now();
        let mut seeds: Vec<(String, Vec<u8>)> = seeds::for_target(name);
        for (file, bytes) in seeds::from_dir(name) {
            // The committed copies of the generated seeds run once, not twice.
            if !seeds.iter().any(|(_, b)| *b == bytes) {
                seeds.push((file, bytes));
            }
        }
        let corpus: Vec<Vec<u8>> = seeds.iter().map(|(_, b)| b.clone()).collect();
        // One stream per target, so a target's inputs do not depend on the others.
        let mut rng = Rng(options.seed
            ^ name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)));
        let mut failures = Vec::new();
        for (seed_name, data) in &seeds {
            if let Err(why) = run_one(body, data, options.max_input) {
                failures.push(format!("seed {seed_name}: {why}"));
            }
        }
        for i in 0..options.iterations {
            let data = input(&mut rng, &corpus);
            if let Err(why) = run_one(body, &data, options.max_input) {
                let path = save_failure(name, &format!("{}-{i}", options.seed), &data);
                failures.push(format!("input {i} ({} bytes, {}): {why}", data.len(), path.display()));
                if failures.len() >= 5 {
                    break;
                }
            }
        }
        let took = start.elapsed();
        if failures.is_empty() {
            passed += 1;
            println!(
                "{name}: ok, {} seeds + {} inputs in {:.1} s",
                seeds.len(),
                options.iterations,
                took.as_secs_f64()
            );
        } else {
            failed += 1;
            println!("{name}: FAILED");
            for f in &failures {
                println!("  {f}");
            }
        }
    }
    println!("fuzz-stable: {:.1} s, seed {}", total.elapsed().as_secs_f64(), options.seed);
    println!("{passed} passed, {failed} failed");
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
