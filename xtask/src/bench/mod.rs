//! `cargo xtask bench`: the main job. Every codec of [`CODECS`] runs on the input
//! (default: the fixtures), on the CPU and, when there is one, on the GPU; each round
//! trip is checked bit for bit, and each GPU encoder's bytes against the CPU's, before a
//! number is printed. One table (with a legend) and the same as JSON give the ratio
//! with all metadata counted, encode and decode throughput in GB/s of uncompressed BF16,
//! and on a GPU the fraction of the copy roofline `copy_bw / (1 + 1/ratio)` measured in
//! the same run.
//!
//! A codec joins the bench by implementing `bf16_field::CacheCodec` and
//! `kvcodec_gpu::GpuCacheCodec` and adding one line to [`CODECS`].

mod escapes;
mod exans_host;
mod method;
pub(crate) mod report;

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};
use bf16_field::{CacheCodec, KvCache};
use exans::ExansCodec;
use gaac::GaacCodec;
use kvcodec_gpu::timing::CopyRoofline;
use kvcodec_gpu::{Backend, BackendChoice, GpuCacheCodec, GpuContext};
use splitzip::SplitzipCodec;
use zipfusion::{Variant, ZipfusionCodec};

pub(crate) use method::{Method, TileAxis, median_secs, tiled_cache};
pub(crate) use report::cpu_model;
use report::{Measured, Report, Row};

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// A KV safetensors file; default: every fixture.
    #[arg(long)]
    input: Option<PathBuf>,
    /// What calibrated codecs (SplitZip, GAAC) learn from: a KV file of the same model, or
    /// a JSON `cargo xtask calibrate` wrote (SplitZip codebooks or GAAC bases; the other
    /// codec then calibrates on the default). Default: another fixture of the input's
    /// model (other text), else the input itself.
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// cpu, cuda or auto (default: KVCODEC_BACKEND, else auto).
    #[arg(long)]
    backend: Option<String>,
    /// The CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// CPU threads for the CPU rows (default: rayon's, RAYON_NUM_THREADS or every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Also write the table as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Timed runs per measurement (median reported), at least 1.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Only these codecs (repeat the flag or give a comma list): field-split and the
    /// names in the codec list; default: all.
    #[arg(long = "codec", value_delimiter = ',')]
    codecs: Vec<String>,
    /// Untimed warm-up runs before timing.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// GPU inputs are the file tiled to at least this many bytes (L2 must not serve them).
    #[arg(long, default_value_t = 1 << 30)]
    gpu_bytes: usize,
    /// The axis GPU inputs repeat the file along: tokens (a long context) or layers.
    #[arg(long, value_enum, default_value = "tokens")]
    tile: TileAxis,
}

/// What a codec's entry gets: the input, how to measure, the GPU, and (on first use) the
/// calibration.
pub(crate) struct Ctx<'a> {
    name: &'a str,
    path: &'a Path,
    cache: &'a KvCache,
    calibration_arg: Option<&'a Path>,
    /// SplitZip's codebooks and where they came from, made on first use.
    splitzip: std::cell::OnceCell<(SplitzipCodec, String)>,
    /// GAAC's bases and where they came from, made on first use.
    gaac: std::cell::OnceCell<(gaac::Bases, String)>,
    method: Method,
    gpu: Option<(&'a GpuContext, &'a CopyRoofline)>,
}

impl Ctx<'_> {
    /// This context over `cache`, a variant of the input the bench made, named `name`; its
    /// calibrations are made afresh on first use (or set by the caller).
    fn with_cache<'b>(&'b self, name: &'b str, cache: &'b KvCache) -> Ctx<'b> {
        Ctx {
            name,
            path: self.path,
            cache,
            calibration_arg: self.calibration_arg,
            splitzip: std::cell::OnceCell::new(),
            gaac: std::cell::OnceCell::new(),
            method: self.method,
            gpu: self.gpu,
        }
    }

    /// `--calibration` when it names a JSON `cargo xtask calibrate` wrote (SplitZip
    /// codebooks or GAAC bases).
    fn calibration_json(&self) -> Option<&Path> {
        self.calibration_arg.filter(|p| p.extension().is_some_and(|e| e == "json"))
    }

    /// `--calibration` when it names a KV file to calibrate on (anything but a JSON).
    fn calibration_kv_file(&self) -> Option<&Path> {
        self.calibration_arg.filter(|p| p.extension().is_none_or(|e| e != "json"))
    }

    /// SplitZip calibrated as `--calibration` says (or by [`calibration_for`]'s default),
    /// and where its codebooks came from. A GAAC bases file counts as none (GAAC's rows use
    /// it); any other JSON that is not a codebook file is an error.
    fn splitzip(&self) -> anyhow::Result<&(SplitzipCodec, String)> {
        if let Some(done) = self.splitzip.get() {
            return Ok(done);
        }
        let codebooks = self.calibration_json().filter(|json| {
            let gaac_bases = gaac::Bases::load(json).is_ok();
            if gaac_bases {
                eprintln!("[bench] {}: --calibration holds GAAC bases, not SplitZip codebooks", self.name);
            }
            !gaac_bases
        });
        let made = match codebooks {
            Some(json) => {
                let codec =
                    SplitzipCodec::load(json).map_err(|e| crate::codebook_error("--calibration", json, e))?;
                (codec, crate::shown(json))
            }
            None => {
                let (cache, source) = calibration_for(self.path, self.calibration_kv_file(), self.cache)?;
                (SplitzipCodec::calibrate(&cache)?, source)
            }
        };
        eprintln!("[bench] {}: splitzip codebooks from {}", self.name, made.1);
        Ok(self.splitzip.get_or_init(|| made))
    }

    /// GAAC's bases: a GAAC bases file given as `--calibration`, else calibrated on the
    /// KV file [`calibration_for`] picks (a SplitZip codebook file counts as none).
    fn gaac_bases(&self) -> anyhow::Result<&(gaac::Bases, String)> {
        if let Some(done) = self.gaac.get() {
            return Ok(done);
        }
        let from_json = self.calibration_json().and_then(|json| match gaac::Bases::load(json) {
            Ok(bases) => Some((bases, crate::shown(json))),
            Err(e) => {
                eprintln!("[bench] {}: --calibration is not a GAAC bases file ({e})", self.name);
                None
            }
        });
        let made = match from_json {
            Some(made) => made,
            None => {
                let (cache, source) = calibration_for(self.path, self.calibration_kv_file(), self.cache)?;
                (gaac::Bases::calibrate(&cache), source)
            }
        };
        eprintln!("[bench] {}: gaac bases from {}", self.name, made.1);
        Ok(self.gaac.get_or_init(|| made))
    }
}

/// A codec's line in the bench: its name and how to make its rows.
struct Entry {
    name: &'static str,
    rows: fn(&Ctx<'_>) -> anyhow::Result<Vec<Row>>,
}

/// Every codec the bench runs, in table order.
const CODECS: &[Entry] = &[
    Entry {
        name: "splitzip",
        rows: |ctx| {
            // The calibration file's checksum setting is not this row's.
            let (codec, source) = ctx.splitzip()?;
            let codec = SplitzipCodec { checksum: false, ..*codec };
            let mut rows = codec_rows(ctx, &codec)?;
            rows.iter_mut().for_each(|r| r.calibrated_on = Some(source.clone()));
            Ok(rows)
        },
    },
    // SplitZip on the input with exponents moved out of its codebooks, a sweep of escape
    // rates (escapes.rs).
    Entry { name: "splitzip-escapes", rows: escapes::rows },
    Entry {
        name: "exans",
        rows: |ctx| {
            Ok(codec_rows(ctx, &ExansCodec::default())?.into_iter().chain(exans_host::rows(ctx)?).collect())
        },
    },
    Entry { name: "gaac", rows: |ctx| gaac_rows(ctx, false) },
    // Self-calibration: each encode calibrates on the cache's first 128 tokens (on the
    // device in the GPU rows).
    Entry { name: "gaac-self", rows: |ctx| codec_rows(ctx, &GaacCodec::default()) },
    // Format version 2's checksum: the Adler-32 of the container's bytes after the header.
    Entry { name: "gaac-checksum", rows: |ctx| gaac_rows(ctx, true) },
    Entry {
        name: "splitzip-checksum",
        rows: |ctx| {
            let (codec, source) = ctx.splitzip()?;
            let codec = SplitzipCodec { checksum: true, ..*codec };
            let mut rows = codec_rows(ctx, &codec)?;
            rows.iter_mut().for_each(|r| r.calibrated_on = Some(source.clone()));
            Ok(rows)
        },
    },
    Entry {
        name: "exans-checksum",
        rows: |ctx| codec_rows(ctx, &ExansCodec { checksum: true, ..Default::default() }),
    },
    Entry { name: "zipfusion", rows: |ctx| codec_rows(ctx, &ZipfusionCodec::default()) },
    Entry {
        name: "zipfusion-zero",
        rows: |ctx| codec_rows(ctx, &ZipfusionCodec { variant: Variant::ZeroAware, checksum: false }),
    },
    Entry {
        name: "zipfusion-checksum",
        rows: |ctx| codec_rows(ctx, &ZipfusionCodec { variant: Variant::Base, checksum: true }),
    },
    Entry {
        name: "zipfusion-zero-checksum",
        rows: |ctx| codec_rows(ctx, &ZipfusionCodec { variant: Variant::ZeroAware, checksum: true }),
    },
];

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build_global()?;
    }
    let known: Vec<&str> = std::iter::once("field-split").chain(CODECS.iter().map(|e| e.name)).collect();
    for c in &args.codecs {
        ensure!(known.contains(&c.as_str()), "--codec {c}: expected one of {}", known.join(", "));
    }
    let wanted = |name: &str| args.codecs.is_empty() || args.codecs.iter().any(|c| c == name);
    let choice = match &args.backend {
        Some(b) => b.parse::<BackendChoice>()?,
        None => BackendChoice::from_env()?,
    };
    // KVCODEC_REQUIRE_GPU=1 turns a silent CPU fallback into an error on a GPU machine;
    // an explicit --backend still wins.
    let required = std::env::var("KVCODEC_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let choice = if required && args.backend.is_none() { BackendChoice::Cuda } else { choice };
    let backend = Backend::probe(choice, args.device)?;
    eprintln!("[bench] backend: {backend}");
    // Fail before measuring, not after, when the JSON cannot be written.
    if let Some(json) = &args.json {
        std::fs::write(json, "").with_context(|| format!("--json {}", crate::shown(json)))?;
    }
    if let Some(calibration) = &args.calibration {
        std::fs::metadata(calibration)
            .with_context(|| format!("--calibration {}", crate::shown(calibration)))?;
    }
    let runs = args.runs as usize;
    let method = Method { runs, warmup: args.warmup, gpu_bytes: args.gpu_bytes, tile: args.tile };
    let paths = crate::inputs(args.input.clone())?;
    let copy = match backend.gpu() {
        Some(gpu) => {
            let c = gpu.copy_bandwidth(args.gpu_bytes, 2, runs)?;
            eprintln!("[bench] device-to-device copy: {:.0} GB/s (read+write), median of {runs}", c.gb_per_s);
            Some(c)
        }
        None => None,
    };
    let mut rows = Vec::new();
    for path in &paths {
        let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let cache = crate::read_cache(path)?;
        let ctx = Ctx {
            name: &name,
            path,
            cache: &cache,
            calibration_arg: args.calibration.as_deref(),
            splitzip: std::cell::OnceCell::new(),
            gaac: std::cell::OnceCell::new(),
            method,
            gpu: backend.gpu().zip(copy.as_ref()),
        };
        if wanted("field-split") {
            rows.extend(field_rows(&ctx)?);
        }
        for entry in CODECS.iter().filter(|e| wanted(e.name)) {
            rows.extend((entry.rows)(&ctx).with_context(|| format!("{}: {}", entry.name, name))?);
        }
    }
    report::print_table(&rows, args.warmup)?;
    if let Some(json) = &args.json {
        let (commit, dirty) = build_info();
        let report = Report {
            date: report::today(),
            commit,
            dirty,
            kernels_lock_sha256: kernels_lock_sha256(),
            host_cpu: report::host_cpu(),
            backend: backend.to_string(),
            device: backend.gpu().map(|g| g.info().to_string()),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            rows,
        };
        std::fs::write(json, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("--json {}", crate::shown(json)))?;
        eprintln!("[bench] wrote {}", crate::shown(json));
    }
    Ok(())
}

/// The cache a calibrated codec learns from for `input`, and where it came from:
/// `--calibration` if given; else another fixture of the input's model over other text
/// (the SplitZip paper's protocol: calibrate on separate data of the same model); else
/// the input itself, said on stderr. Never another model's cache: a codebook from another
/// model escapes many more values.
pub(crate) fn calibration_for(
    input: &Path,
    given: Option<&Path>,
    cache: &KvCache,
) -> anyhow::Result<(KvCache, String)> {
    if let Some(path) = given {
        return Ok((crate::read_cache(path)?, crate::shown(path)));
    }
    if let Some(other) = other_text_of_model(input) {
        let cache = crate::read_cache(&other)?;
        return Ok((cache, format!("{} (same model, other text)", crate::shown(&other))));
    }
    eprintln!(
        "[bench] {}: no other KV file of its model over other text (pass --calibration): calibrating on the input itself",
        crate::shown(input)
    );
    Ok((cache.clone(), format!("{} itself", crate::shown(input))))
}

/// A fixture of the same model as `input` (its `model` metadata) over other text, if
/// there is one.
pub(crate) fn other_text_of_model(input: &Path) -> Option<PathBuf> {
    let meta = |p: &Path| bf16_field::io::read_kv_metadata(p).unwrap_or_default();
    let input_meta = meta(input);
    let input_bytes = std::fs::read(input).unwrap_or_default();
    let model = input_meta.get("model")?;
    let other_text = |candidate: &Path| {
        let m = meta(candidate);
        let same_text = m.get("text_sha256").is_some_and(|h| Some(h) == input_meta.get("text_sha256"));
        m.get("model") == Some(model)
            && !same_text
            && std::fs::read(candidate).ok().as_deref() != Some(input_bytes.as_slice())
    };
    crate::fixture_files().unwrap_or_default().into_iter().find(|f| other_text(f))
}

/// The rows of GAAC with the calibrated bases (the calibration file's, or the fixture's
/// own), with or without the checksum.
fn gaac_rows(ctx: &Ctx<'_>, checksum: bool) -> anyhow::Result<Vec<Row>> {
    let (bases, source) = ctx.gaac_bases()?;
    // The checksum rows: format version 2's (the Adler-32 of the container's bytes).
    let version = checksum.then_some(gaac::format::VERSION);
    let codec = GaacCodec { bases: Some(bases.clone()), checksum, version, ..Default::default() };
    let mut rows = codec_rows(ctx, &codec)?;
    rows.iter_mut().for_each(|r| r.calibrated_on = Some(source.clone()));
    Ok(rows)
}

/// A codec's CPU row and, with a GPU, its device-resident GPU row.
fn codec_rows<C: GpuCacheCodec>(ctx: &Ctx<'_>, codec: &C) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![cpu_row(ctx, codec)?];
    if let Some((gpu, copy)) = ctx.gpu {
        rows.push(gpu_row(ctx, codec, gpu, copy)?);
    }
    Ok(rows)
}

/// A codec's CPU row.
fn cpu_row<C: CacheCodec>(ctx: &Ctx<'_>, codec: &C) -> anyhow::Result<Row> {
    let m = &ctx.method;
    let cache = ctx.cache;
    let shape = cache.shape();
    let n = shape.total_values();
    // The codec's own word order, gathered once outside the timing: the rows time the
    // codec, not a reordering of the cache.
    let words = cache.words_in(codec.word_order());
    let mut encoded = Vec::new();
    let encode_secs = median_secs(m, || -> Result<(), C::Error> {
        encoded = codec.encode_words(&words, shape)?;
        Ok(())
    })?;
    let mut out = vec![0u16; n];
    let decode_secs = median_secs(m, || codec.decode_into(&encoded, shape, &mut out))?;
    ensure!(out == words, "{}: CPU round trip differs", ctx.name);
    Ok(Row::cpu(Measured {
        input: ctx.name.into(),
        codec: codec.name().into(),
        values: n,
        encoded_bytes: encoded.len(),
        encode_secs: Some(encode_secs),
        decode_secs,
        runs: m.runs,
    }))
}

/// A codec's GPU row: the cache tiled past L2, two copies of every input alternated.
fn gpu_row<C: GpuCacheCodec>(
    ctx: &Ctx<'_>,
    codec: &C,
    gpu: &GpuContext,
    copy: &CopyRoofline,
) -> anyhow::Result<Row> {
    let m = &ctx.method;
    let (big, copies) = tiled_cache(ctx.cache, m.gpu_bytes, m.tile)?;
    let shape = big.shape();
    let n = shape.total_values();
    let words = big.words_in(codec.word_order());
    let cpu_bytes = codec.encode_words(&words, shape)?;
    let inputs = [gpu.upload(&words)?, gpu.upload(&words)?];
    let mut encoder = codec.device_encoder(gpu, shape)?;
    let encode = gpu
        .time_runs(m.warmup, m.runs, |i| codec.encode_device(gpu, &mut encoder, &inputs[i % 2].slice(..n)))?;
    ensure!(
        codec.encoded_bytes(gpu, &encoder)? == cpu_bytes,
        "{}: GPU bytes differ from the CPU's",
        ctx.name
    );
    drop((inputs, encoder));
    let mut decoders =
        [codec.device_decoder(gpu, &cpu_bytes, shape)?, codec.device_decoder(gpu, &cpu_bytes, shape)?];
    let mut out = gpu.zeros::<u16>(n)?;
    let decode = gpu.time_runs(m.warmup, m.runs, |i| {
        codec.decode_device(gpu, &mut decoders[i % 2], &mut out.slice_mut(..n))
    })?;
    for d in &decoders {
        codec.finish_decode(gpu, d)?;
    }
    ensure!(gpu.download(&out, n)? == words, "{}: GPU round trip differs", ctx.name);
    let measured = Measured {
        input: format!("{} x{copies}", ctx.name),
        codec: codec.name().into(),
        values: n,
        encoded_bytes: cpu_bytes.len(),
        encode_secs: Some(encode.median_ms * 1e-3),
        decode_secs: decode.median_ms * 1e-3,
        runs: m.runs,
    };
    Ok(Row::gpu(measured, copy))
}

/// The plain BF16 field split and merge: the memory-bound reference of ratio 1.
fn field_rows(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let m = &ctx.method;
    let words = ctx.cache.concat_words();
    let n = words.len();
    let (mut e, mut sf) = (vec![0u8; n], vec![0u8; n]);
    let mut back = vec![0u16; n];
    let encode_secs = median_secs(m, || bf16_field::split(&words, &mut e, &mut sf))?;
    let decode_secs = median_secs(m, || bf16_field::merge(&e, &sf, &mut back))?;
    ensure!(back == words, "{}: field split/merge round trip differs", ctx.name);
    let measured = |input: String, values, encode_secs, decode_secs| Measured {
        input,
        codec: "field-split".into(),
        values,
        encoded_bytes: 2 * values,
        encode_secs: Some(encode_secs),
        decode_secs,
        runs: m.runs,
    };
    let mut rows = vec![Row::cpu(measured(ctx.name.into(), n, encode_secs, decode_secs))];
    let Some((gpu, copy)) = ctx.gpu else { return Ok(rows) };
    let (big, copies) = tiled_cache(ctx.cache, m.gpu_bytes, m.tile)?;
    let words = big.concat_words();
    let n = words.len();
    let inputs = [gpu.upload(&words)?, gpu.upload(&words)?];
    let mut e = gpu.zeros::<u8>(n)?;
    let mut sf = gpu.zeros::<u8>(n)?;
    let mut out = gpu.zeros::<u16>(n)?;
    let split = gpu.time_runs(m.warmup, m.runs, |i| {
        kvcodec_gpu::field::split(
            gpu,
            &inputs[i % 2].slice(..n),
            &mut e.slice_mut(..n),
            &mut sf.slice_mut(..n),
        )
    })?;
    let merge = gpu.time_runs(m.warmup, m.runs, |_| {
        kvcodec_gpu::field::merge(gpu, &e.slice(..n), &sf.slice(..n), &mut out.slice_mut(..n))
    })?;
    ensure!(gpu.download(&out, n)? == words, "{}: GPU split/merge round trip differs", ctx.name);
    let (cpu_e, cpu_sf) = bf16_field::split_to_vec(&words);
    ensure!(
        gpu.download(&e, n)? == cpu_e && gpu.download(&sf, n)? == cpu_sf,
        "{}: GPU split differs",
        ctx.name
    );
    let input = format!("{} x{copies}", ctx.name);
    rows.push(Row::gpu(measured(input, n, split.median_ms * 1e-3, merge.median_ms * 1e-3), copy));
    Ok(rows)
}

/// The commit this binary was built from and whether its tree was dirty: from
/// `build-info.json` beside the executable (written by `cargo xtask gpu-bundle`), else
/// from git in the workspace; `("unknown", false)` without either.
pub(crate) fn build_info() -> (String, bool) {
    let beside = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.join("build-info.json")));
    if let Some(info) = beside.and_then(|p| std::fs::read_to_string(p).ok())
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(&info)
    {
        let commit = v["commit"].as_str().unwrap_or("unknown").to_string();
        return (commit, v["dirty"].as_bool().unwrap_or(false));
    }
    crate::git_state().unwrap_or_else(|| ("unknown".into(), false))
}

/// SHA-256 of the `kernels/kernels.lock` compiled into this binary (the lock names the
/// hash of every PTX the crates embed).
pub(crate) fn kernels_lock_sha256() -> String {
    use sha2::{Digest, Sha256};
    let lock = include_bytes!("../../../kernels/kernels.lock");
    Sha256::digest(lock).iter().map(|b| format!("{b:02x}")).collect()
}
