//! `cargo xtask bench`: the main job. Every codec that exists runs on the input (default:
//! the fixtures); each round trip is checked bit for bit before a number is printed; one
//! table (and the same as JSON) gives the ratio with all metadata counted, encode and
//! decode throughput in GB/s of uncompressed BF16 bytes, the backend, and on a GPU the
//! fraction of the copy roofline `copy_bw / (1 + 1/ratio)` measured in the same run.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, ensure};
use bf16_field::KvCache;
use bf16_field::gpu::{Backend, BackendChoice, GpuContext, timing::CopyRoofline};
use cudarc::driver::CudaSlice;

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// A KV safetensors file; default: every fixture.
    #[arg(long)]
    pub(crate) input: Option<PathBuf>,
    /// cpu, cuda or auto (default: KVCODEC_BACKEND, else auto).
    #[arg(long)]
    pub(crate) backend: Option<String>,
    /// Also write the table as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Timed runs per measurement (median reported).
    #[arg(long, default_value_t = 20)]
    pub(crate) runs: usize,
    /// Only these codecs (repeat the flag or give a comma list); default: all.
    #[arg(long = "codec", value_enum, value_delimiter = ',')]
    pub(crate) codecs: Vec<Codec>,
    /// Untimed warm-up runs before timing.
    #[arg(long, default_value_t = 3)]
    pub(crate) warmup: usize,
    /// GPU inputs are the file tiled to at least this many bytes (L2 must not serve them).
    #[arg(long, default_value_t = 1 << 30)]
    pub(crate) gpu_bytes: usize,
}

/// The codecs `bench` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Codec {
    /// The plain BF16 field split and merge (bf16-field), the memory-bound reference.
    FieldSplit,
    /// SplitZip (crates/splitzip).
    Splitzip,
    /// ExANS (crates/exans).
    Exans,
}

/// One line of the table.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Row {
    pub(crate) input: String,
    pub(crate) codec: String,
    pub(crate) backend: String,
    pub(crate) values: usize,
    pub(crate) raw_bytes: usize,
    pub(crate) encoded_bytes: usize,
    pub(crate) ratio: f64,
    /// Uncompressed GB/s; `None` for the host-to-device rows, which only decode.
    pub(crate) encode_gb_s: Option<f64>,
    /// Uncompressed GB/s delivered (host-to-device rows: into device memory).
    pub(crate) decode_gb_s: f64,
    /// Measured device-to-device copy, read+write GB/s (device-resident GPU rows only).
    pub(crate) copy_gb_s: Option<f64>,
    /// Measured copy from page-locked host memory to the device, GB/s of the bytes the
    /// link moved (host-to-device rows only: [`Row::host_to_device`]).
    pub(crate) h2d_gb_s: Option<f64>,
    /// encode GB/s over `copy_bw / (1 + 1/ratio)` (GPU rows only).
    pub(crate) encode_roofline: Option<f64>,
    /// decode GB/s over `copy_bw / (1 + 1/ratio)` (device-resident GPU rows), or over
    /// `h2d_bw x ratio` (host-to-device rows: the link carrying compressed bytes).
    pub(crate) decode_roofline: Option<f64>,
    pub(crate) runs: usize,
}

/// What one measurement found; [`Row::new`] derives the rest of the row.
pub(crate) struct Measured {
    /// The input's name (with `xN` when tiled for the GPU).
    pub(crate) input: String,
    /// BF16 values encoded.
    pub(crate) values: usize,
    /// Encoded bytes, all metadata counted.
    pub(crate) encoded_bytes: usize,
    /// Seconds per encode (median).
    pub(crate) encode_secs: f64,
    /// Seconds per decode (median).
    pub(crate) decode_secs: f64,
}

impl Codec {
    fn name(self) -> &'static str {
        match self {
            Codec::FieldSplit => "field-split",
            Codec::Splitzip => "splitzip",
            Codec::Exans => "exans",
        }
    }
}

impl Row {
    /// A row without GPU roofline columns ([`Row::gpu`] adds them).
    pub(crate) fn new(codec: Codec, backend: &str, m: Measured, args: &BenchArgs) -> Row {
        let raw_bytes = 2 * m.values;
        Row {
            input: m.input,
            codec: codec.name().into(),
            backend: backend.into(),
            values: m.values,
            raw_bytes,
            encoded_bytes: m.encoded_bytes,
            ratio: raw_bytes as f64 / m.encoded_bytes as f64,
            encode_gb_s: Some(raw_bytes as f64 / m.encode_secs / 1e9),
            decode_gb_s: raw_bytes as f64 / m.decode_secs / 1e9,
            copy_gb_s: None,
            h2d_gb_s: None,
            encode_roofline: None,
            decode_roofline: None,
            runs: args.runs,
        }
    }

    /// A host-to-device row: `values` BF16 values delivered into device memory in `secs`
    /// (median) while the link moved `moved_bytes` (the container, or the raw cache for
    /// a plain copy); `h2d_gb_s` is the page-locked copy bandwidth measured in the same
    /// run, which with the ratio gives the roofline `h2d_gb_s x ratio`.
    pub(crate) fn host_to_device(codec: &str, m: Measured, h2d_gb_s: f64, args: &BenchArgs) -> Row {
        let mut row = Row::new(Codec::Exans, "cuda", m, args);
        row.codec = codec.into();
        row.encode_gb_s = None;
        row.h2d_gb_s = Some(h2d_gb_s);
        row.decode_roofline = Some(row.decode_gb_s / (h2d_gb_s * row.ratio));
        row
    }

    pub(crate) fn gpu(mut self, copy: &CopyRoofline) -> Self {
        let bound = copy.bound_gb_per_s(self.ratio);
        self.copy_gb_s = Some(copy.gb_per_s);
        self.encode_roofline = self.encode_gb_s.map(|e| e / bound);
        self.decode_roofline = Some(self.decode_gb_s / bound);
        self
    }
}

#[derive(serde::Serialize)]
struct Report {
    date: String,
    host_cpu: String,
    backend: String,
    command: String,
    rows: Vec<Row>,
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<()> {
    let choice = match &args.backend {
        Some(b) => b.parse::<BackendChoice>()?,
        None => BackendChoice::from_env()?,
    };
    // KVCODEC_REQUIRE_GPU=1 turns a silent CPU fallback into an error on the device machine.
    let choice = if std::env::var("KVCODEC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        BackendChoice::Cuda
    } else {
        choice
    };
    let backend = Backend::with_choice(choice)?;
    eprintln!("[bench] backend: {backend}");
    let paths = crate::inputs(args.input.clone())?;
    let caches = paths
        .iter()
        .map(|p| bf16_field::io::read_kv_cache(p).with_context(|| p.display().to_string()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let copy = match backend.gpu() {
        Some(gpu) => {
            let c = gpu.copy_bandwidth(args.gpu_bytes, 2, args.runs)?;
            eprintln!(
                "[bench] device-to-device copy: {:.0} GB/s (read+write), median of {}",
                c.gb_per_s, args.runs
            );
            Some(c)
        }
        None => None,
    };
    let mut rows = Vec::new();
    for (i, (path, cache)) in paths.iter().zip(&caches).enumerate() {
        let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let wanted = |codec: Codec| args.codecs.is_empty() || args.codecs.contains(&codec);
        if wanted(Codec::FieldSplit) {
            rows.push(bench_field_cpu(&name, cache, &args)?);
            if let (Some(gpu), Some(copy)) = (backend.gpu(), &copy) {
                rows.push(bench_field_gpu(&name, cache, gpu, &args)?.gpu(copy));
            }
        }
        if wanted(Codec::Splitzip) {
            let calibration = calibration_for(i, &paths, &caches)?;
            let sz = crate::bench_splitzip::SplitzipInput::new(cache, &calibration)?;
            rows.push(sz.bench_cpu(&name, &args)?);
            if let (Some(gpu), Some(copy)) = (backend.gpu(), &copy) {
                rows.push(sz.bench_gpu(&name, gpu, &args)?.gpu(copy));
            }
        }
        if !wanted(Codec::Exans) {
            continue;
        }
        rows.push(crate::bench_exans::bench_cpu(&name, cache, &args)?);
        if let (Some(gpu), Some(copy)) = (backend.gpu(), &copy) {
            rows.extend(crate::bench_exans::bench_gpu(&name, cache, gpu, copy, &args)?);
        }
    }
    print_table(&rows);
    println!("every row's round trip was checked bit for bit before it was timed or printed");
    if let Some(json) = &args.json {
        let report = Report {
            date: today(),
            host_cpu: host_cpu(),
            backend: backend.to_string(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            rows,
        };
        std::fs::write(json, serde_json::to_string_pretty(&report)? + "\n")?;
        eprintln!("[bench] wrote {}", json.display());
    }
    Ok(())
}

/// The calibration cache for input `i`: another corpus, as SplitZip's protocol asks
/// (calibrate on separate data). With one input, the other committed fixture; if there
/// is none, the input itself (said on stderr).
fn calibration_for(i: usize, paths: &[PathBuf], caches: &[KvCache]) -> anyhow::Result<KvCache> {
    if caches.len() > 1 {
        return Ok(caches[(i + 1) % caches.len()].clone());
    }
    let own = paths[i].canonicalize().ok();
    if let Some(other) =
        crate::fixture_files().unwrap_or_default().into_iter().find(|f| f.canonicalize().ok() != own)
    {
        eprintln!("[bench] calibrating on {}", other.display());
        return Ok(bf16_field::io::read_kv_cache(&other)?);
    }
    eprintln!("[bench] no second KV file: calibrating on the input itself");
    Ok(caches[i].clone())
}

/// Median wall time of `runs` calls after `warmup` calls, in seconds.
pub(crate) fn median_secs(warmup: usize, runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warmup {
        f();
    }
    let mut t: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn bench_field_cpu(input: &str, cache: &KvCache, args: &BenchArgs) -> anyhow::Result<Row> {
    let words = cache.concat_words();
    let n = words.len();
    let (mut e, mut sf) = (vec![0u8; n], vec![0u8; n]);
    let mut back = vec![0u16; n];
    let enc =
        median_secs(args.warmup, args.runs, || bf16_field::split(&words, &mut e, &mut sf).expect("lengths"));
    let dec = median_secs(args.warmup, args.runs, || bf16_field::merge(&e, &sf, &mut back).expect("lengths"));
    ensure!(back == words, "{input}: field split/merge round trip differs");
    let m =
        Measured { input: input.into(), values: n, encoded_bytes: 2 * n, encode_secs: enc, decode_secs: dec };
    Ok(Row::new(Codec::FieldSplit, "cpu", m, args))
}

/// The cache's words repeated until at least `min_bytes` bytes, in whole copies.
pub(crate) fn tiled(words: &[u16], min_bytes: usize) -> Vec<u16> {
    let copies = (min_bytes / 2).div_ceil(words.len()).max(1);
    let mut out = Vec::with_capacity(copies * words.len());
    for _ in 0..copies {
        out.extend_from_slice(words);
    }
    out
}

fn bench_field_gpu(input: &str, cache: &KvCache, gpu: &GpuContext, args: &BenchArgs) -> anyhow::Result<Row> {
    let words = tiled(&cache.concat_words(), args.gpu_bytes);
    let n = words.len();
    let stream = gpu.stream();
    // Two input copies, alternated run by run, so L2 (50 MB on an H200) never serves them.
    let inputs: Vec<CudaSlice<u16>> = (0..2).map(|_| stream.clone_htod(&words)).collect::<Result<_, _>>()?;
    let mut e: CudaSlice<u8> = stream.alloc_zeros(n)?;
    let mut sf: CudaSlice<u8> = stream.alloc_zeros(n)?;
    let mut out: CudaSlice<u16> = stream.alloc_zeros(n)?;
    let split = gpu.time_runs(args.warmup, args.runs, |i| {
        gpu.split(&inputs[i % 2].as_view(), &mut e.as_view_mut(), &mut sf.as_view_mut())
    })?;
    let merge = gpu.time_runs(args.warmup, args.runs, |_| {
        gpu.merge(&e.as_view(), &sf.as_view(), &mut out.as_view_mut())
    })?;
    ensure!(stream.clone_dtoh(&out)? == words, "{input}: GPU split/merge round trip differs");
    let (cpu_e, cpu_sf) = bf16_field::split_to_vec(&words);
    ensure!(
        stream.clone_dtoh(&e)? == cpu_e && stream.clone_dtoh(&sf)? == cpu_sf,
        "{input}: GPU split differs from the CPU"
    );
    let m = Measured {
        input: format!("{input} x{}", n / cache.shape().total_values()),
        values: n,
        encoded_bytes: 2 * n,
        encode_secs: split.median_ms * 1e-3,
        decode_secs: merge.median_ms * 1e-3,
    };
    Ok(Row::new(Codec::FieldSplit, "cuda", m, args))
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<28} {:<16} {:<7} {:>8} {:>10} {:>10} {:>9} {:>9}",
        "input", "codec", "backend", "ratio", "enc GB/s", "dec GB/s", "enc roof", "dec roof"
    );
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
    for r in rows {
        println!(
            "{:<28} {:<16} {:<7} {:>8.4} {:>10} {:>10.2} {:>9} {:>9}",
            r.input,
            r.codec,
            r.backend,
            r.ratio,
            r.encode_gb_s.map_or("-".to_string(), |e| format!("{e:.2}")),
            r.decode_gb_s,
            pct(r.encode_roofline),
            pct(r.decode_roofline)
        );
    }
    if let Some(c) = rows.iter().find_map(|r| r.copy_gb_s) {
        println!("roofline: copy_bw / (1 + 1/ratio), copy_bw = {c:.0} GB/s read+write measured in this run");
    }
    if rows.iter().any(|r| r.h2d_gb_s.is_some()) {
        println!(
            "h2d-* / exans-h2d-* rows: decode GB/s = uncompressed bytes landed in device memory per second \
             from page-locked host memory; roofline: h2d_bw x ratio (the link carrying the compressed bytes)"
        );
    }
}

fn host_cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
        + &format!(", {} threads", rayon::current_num_threads())
}

/// Today's UTC date as YYYY-MM-DD (civil-from-days, no date crate needed for one line).
fn today() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
