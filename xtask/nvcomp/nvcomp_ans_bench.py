#!/usr/bin/env python3
"""nvCOMP ANS on a kvcodec KV fixture, measured the way docs/PERF.md measures ExANS.

Loads a KV safetensors fixture (tensors ``layer.{i}.k`` / ``layer.{i}.v``, bf16
``[T, H, D]``), concatenates the raw bytes as layer 0 K, layer 0 V, layer 1 K, ...,
tiles that to at least ``--min-bytes`` (1 GiB) on the GPU in whole copies and, for
each nvCOMP ANS variant, measures:

* ratio: uncompressed bytes / total compressed bytes (nvCOMP's NVCOMP_NATIVE
  bitstream, i.e. including its own headers and chunk tables);
* encode and decode throughput in GB/s (10^9 B/s) of uncompressed bytes: CUDA
  events around each call on the codec's stream, 3 warm-ups, median of 20 runs,
  synchronising after each run, two input copies alternated so L2 (50 MB on an
  H200) cannot serve them;
* a bit-exact round trip (decode output compared with the input on the GPU);
* the roofline ``copy_bw / (1 + 1/ratio)``, with ``copy_bw`` (bytes read + bytes
  written per second) from a device-to-device copy of the same size timed in the
  same run.

A variant that fails (option not supported, out of memory, ...) prints its
exception and the others still run. Exit status: 0 if at least one variant ran
and no round trip differed, 1 otherwise.

Needs torch with CUDA and the ``nvidia-nvcomp-cu13`` + ``nvidia-libnvcomp-cu13``
wheels (API as in nvCOMP 6.0: ``nvidia.nvcomp.Codec``, ``as_array``,
``compression_config`` / ``decompression_config``, ``encode(..., out=)``,
``decode(..., out=)``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import struct
import subprocess
import sys
import time
import traceback

KIB = 1024
MIB = 1024 * KIB

# ---------------------------------------------------------------------------
# Fixture loading (pure Python: the safetensors header is JSON, data is raw).
# ---------------------------------------------------------------------------


def load_kv_tensors(path: str) -> list[tuple[str, bytes]]:
    """The fixture's tensors as (name, raw little-endian bf16 bytes), in the order
    layer 0 K, layer 0 V, layer 1 K, ..."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + hlen])
    data = memoryview(blob)[8 + hlen :]
    layers: dict[int, dict[str, dict]] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        m = re.fullmatch(r"layer\.(\d+)\.([kv])", name)
        if not m:
            raise ValueError(f"{path}: unexpected tensor {name!r}")
        if meta["dtype"] != "BF16" or len(meta["shape"]) != 3:
            raise ValueError(f"{path}: {name} is {meta['dtype']} {meta['shape']}, want BF16 [T, H, D]")
        layers.setdefault(int(m.group(1)), {})[m.group(2)] = meta
    if sorted(layers) != list(range(len(layers))):
        raise ValueError(f"{path}: layers are not 0..{len(layers) - 1}")
    out = []
    for i in range(len(layers)):
        for kind in ("k", "v"):
            meta = layers[i].get(kind)
            if meta is None:
                raise ValueError(f"{path}: layer.{i}.{kind} missing")
            a, b = meta["data_offsets"]
            t, h, d = meta["shape"]
            if b - a != 2 * t * h * d:
                raise ValueError(f"{path}: layer.{i}.{kind} has {b - a} bytes for shape {meta['shape']}")
            out.append((f"layer.{i}.{kind}", bytes(data[a:b])))
    return out


def copies_for(total_bytes: int, min_bytes: int) -> int:
    """Whole copies of the cache needed to reach min_bytes (as xtask's `tiled`)."""
    return max(1, -(-min_bytes // total_bytes))


# ---------------------------------------------------------------------------
# Timing helpers.
# ---------------------------------------------------------------------------


def ptr_of(obj):
    """Device address of a torch tensor or of any __cuda_array_interface__ object."""
    if hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    try:
        return int(obj.__cuda_array_interface__["data"][0])
    except Exception:  # noqa: BLE001
        return None


def as_u8(torch, obj):
    """A flat uint8 view of a torch tensor or __cuda_array_interface__ object (no copy)."""
    t = obj if isinstance(obj, torch.Tensor) else torch.as_tensor(obj, device="cuda")
    return t.reshape(-1).view(torch.uint8)


def summarize(runs_ms: list[float]) -> dict:
    s = sorted(runs_ms)
    n = len(s)
    med = float("nan") if n == 0 else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)
    return {"median_ms": med, "min_ms": s[0] if s else float("nan"), "max_ms": s[-1] if s else float("nan"), "runs_ms": runs_ms}


# GPU clock cycles torch.cuda._sleep spins before each timed run: about 2 ms on an H200
# (1.98 GHz), as GpuContext::time_runs holds its stream for 2 ms.
HOLD_CYCLES = 4_000_000


def time_runs(torch, stream, warmup: int, runs: int, op) -> dict:
    """op(i) `warmup` times untimed, then `runs` times between two CUDA events on
    `stream`, synchronising after each run; i counts every call from 0 so callers
    can alternate inputs (mirrors GpuContext::time_runs in crates/bf16-field).
    Each timed run is queued behind a spin kernel (torch.cuda._sleep), so the start
    event fires when the GPU reaches it with the work already queued: GPU time,
    without the host's launch latency."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for i in range(warmup):
        op(i)
    stream.synchronize()
    times = []
    for i in range(runs):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(HOLD_CYCLES)
        start.record(stream)
        op(warmup + i)
        end.record(stream)
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return summarize(times)


def gbps(nbytes: int, t: dict) -> float:
    return nbytes / (t["median_ms"] * 1e-3) / 1e9


# ---------------------------------------------------------------------------
# nvCOMP import (the wheels are installed with pip --target into PYTHONPATH).
# ---------------------------------------------------------------------------


def import_nvcomp():
    try:
        from nvidia import nvcomp  # noqa: PLC0415

        return nvcomp
    except ImportError:
        # A regular (non-namespace) `nvidia` package elsewhere on sys.path can hide
        # the --target one: add every sys.path/nvidia that holds nvcomp and retry.
        import nvidia  # noqa: PLC0415

        for p in sys.path:
            cand = os.path.join(p or ".", "nvidia")
            if os.path.isdir(os.path.join(cand, "nvcomp")) and cand not in list(nvidia.__path__):
                nvidia.__path__.append(cand)
        from nvidia import nvcomp  # noqa: PLC0415

        return nvcomp


class _TorchBlock:
    """Device memory for nvCOMP from torch's caching allocator (``.ptr`` protocol of
    nvcomp.set_device_allocator), allocated in stream order on nvCOMP's stream."""

    def __init__(self, torch, nbytes, cuda_stream):
        ptr = getattr(cuda_stream, "ptr", 0) or 0
        if ptr and getattr(cuda_stream, "is_special", False) is False:
            with torch.cuda.stream(torch.cuda.ExternalStream(ptr)):
                self._t = torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device="cuda")
        else:
            self._t = torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device="cuda")
        self.ptr = self._t.data_ptr()


def use_torch_allocator(torch, nvcomp) -> str:
    """Route nvCOMP's device allocations (outputs and per-call temporaries) through
    torch's caching allocator, so no timed call pays a cudaMalloc/cudaFree."""
    nvcomp.set_device_allocator(lambda nbytes, stream: _TorchBlock(torch, nbytes, stream))
    return "torch caching allocator (nvcomp.set_device_allocator)"


def variants(nvcomp) -> list[tuple[str, dict]]:
    """(name, Codec kwargs beyond algorithm/stream). Option names and values are the
    ones documented in nvCOMP 6.0's Codec.__init__ docstring ("ANS algorithm specific
    options": data_type '|u1' / '<f2' (FLOAT16: "applicable to all half-precision
    data formats", so bf16 too), states_per_lane, ...; common: uncomp_chunk_size,
    execution_policy)."""
    v = [
        ("u1-64K", {}),  # nvCOMP defaults: byte symbols, 64 KiB chunks
        ("f2-64K", {"data_type": "<f2"}),
        ("u1-256K", {"uncomp_chunk_size": 256 * KIB}),
        ("f2-16K", {"data_type": "<f2", "uncomp_chunk_size": 16 * KIB}),
        ("f2-256K", {"data_type": "<f2", "uncomp_chunk_size": 256 * KIB}),
        ("f2-1M", {"data_type": "<f2", "uncomp_chunk_size": 1 * MIB}),
        ("f2-64K-spl1", {"data_type": "<f2", "states_per_lane": 1}),
    ]
    pol = getattr(getattr(nvcomp, "ExecutionPolicy", None), "LATENCY", None)
    if pol is not None:
        v.append(("f2-64K-latency", {"data_type": "<f2", "execution_policy": pol}))
    return v


def describe_opts(opts: dict) -> dict:
    return {k: (getattr(v, "name", None) or str(v)) if not isinstance(v, (int, str, float)) else v for k, v in opts.items()}


# ---------------------------------------------------------------------------
# One variant.
# ---------------------------------------------------------------------------


def run_variant(torch, nvcomp, stream, name, opts, inputs, args) -> dict:
    n = inputs[0].numel()
    sid = stream.cuda_stream
    rec: dict = {"variant": name, "options": describe_opts(opts), "uncompressed_bytes": n}
    codec = nvcomp.Codec(algorithm="ANS", device_id=torch.cuda.current_device(), cuda_stream=sid, **opts)
    arrs = [nvcomp.as_array(x, cuda_stream=sid) for x in inputs]

    # Compression config from the size: encode then skips configure_compression, and
    # a DecompressConfig built from it makes decode sync-free (nvCOMP 6.0 docstrings).
    ccfg = None
    try:
        ccfg = codec.compression_config(n)
    except Exception as e:  # noqa: BLE001
        rec["note_ccfg"] = f"compression_config failed: {e!r}"

    def encode(a, out=None):
        kw = {}
        if out is not None:
            kw["out"] = out
        if ccfg is not None:
            kw["compression_config"] = ccfg
        return codec.encode(a, **kw)

    # Untimed encodes with nvCOMP-allocated output: this gives the exact compressed
    # size (a native nvcomp.Array is resized to fit) and the decode inputs.
    comps = [encode(a) for a in arrs]
    stream.synchronize()
    sizes = [int(c.buffer_size) for c in comps]
    rec["compressed_bytes"] = sizes[0]
    if sizes[0] != sizes[1]:
        rec["note_sizes"] = f"the two identical inputs compressed to {sizes} bytes"
    rec["ratio"] = n / sizes[0]
    try:
        rec["header_uncompressed_bytes"] = int(codec.get_uncomp_buffer_size(comps[0]))
    except Exception as e:  # noqa: BLE001
        rec["header_uncompressed_bytes"] = f"error: {e!r}"
    try:
        rec["max_compressed_bytes"] = int(codec.get_max_comp_buffer_size(arrs[0]))
    except Exception as e:  # noqa: BLE001
        rec["max_compressed_bytes"] = None
        rec["note_max"] = f"get_max_comp_buffer_size failed: {e!r}"

    # Decode config: sync-free from the compression config, else parsed from a buffer.
    dcfg = None
    for how, src in (("compression_config", ccfg), ("buffer", comps[0])):
        if src is None:
            continue
        try:
            dcfg = codec.decompression_config(src)
            rec["decompression_config"] = how
            break
        except Exception as e:  # noqa: BLE001
            rec[f"note_dcfg_{how}"] = repr(e)
    if dcfg is None:
        rec["decompression_config"] = "none (decode configures itself, with a stream sync)"

    # Output buffers are preallocated torch tensors, so no timed call allocates its
    # output. nvCOMP 6.0 takes `out` as any buffer object (fixed size, ValueError when
    # too small) or an nvcomp.Array; the tensor itself is tried first, then
    # nvcomp.as_array(tensor), and the one nvCOMP writes in place is kept.
    out_t = torch.empty(n, dtype=torch.uint8, device="cuda")
    ok = True

    def decode(c, out):
        kw = {}
        if out is not None:
            kw["out"] = out
        if dcfg is not None:
            kw["decompression_config"] = dcfg
        return codec.decode(c, **kw)

    def decoded_equals(ret, out, want) -> bool:
        if out is not None and torch.equal(out_t, want):
            return True
        return bool(torch.equal(as_u8(torch, ret), want))

    dec_out = None
    dec_errors = {}
    for form, obj in (("tensor", out_t), ("nvcomp.as_array", None)):
        try:
            if obj is None:
                obj = nvcomp.as_array(out_t, cuda_stream=sid)
            out_t.fill_(0xA5)
            ret = decode(comps[0], obj)
            stream.synchronize()
            if torch.equal(out_t, inputs[0]):
                dec_out, rec["decode_out"] = obj, f"preallocated ({form})"
                break
            dec_errors[form] = ("not written in place; returned buffer "
                                + ("matches" if decoded_equals(ret, None, inputs[0]) else "DIFFERS"))
        except Exception as e:  # noqa: BLE001
            dec_errors[form] = repr(e)
    if dec_errors:
        rec["note_decode_out"] = dec_errors
    if dec_out is None:
        rec["decode_out"] = "nvcomp-allocated (allocation inside timed call)"

    # Bit-exact round trip of both compressed copies, before timing.
    for i, c in enumerate(comps):
        out_t.fill_(0xA5)
        ret = decode(c, dec_out)
        stream.synchronize()
        same = decoded_equals(ret, dec_out, inputs[i])
        ok &= same
        if not same:
            rec[f"note_roundtrip_{i}"] = "decode(compressed copy) != input"
        del ret

    # Encode into preallocated outputs (one per input copy).
    enc_outs = None
    enc_errors = {}
    if rec.get("max_compressed_bytes"):
        bufs = [torch.empty(rec["max_compressed_bytes"], dtype=torch.uint8, device="cuda") for _ in range(2)]
        for form in ("tensor", "nvcomp.as_array"):
            try:
                objs = bufs if form == "tensor" else [nvcomp.as_array(b, cuda_stream=sid) for b in bufs]
                r = encode(arrs[0], objs[0])
                stream.synchronize()
                in_place = ptr_of(r) == bufs[0].data_ptr() if ptr_of(r) is not None else None
                size = int(getattr(r, "buffer_size", -1))
                out_t.fill_(0x5A)
                ret = decode(r, dec_out)
                stream.synchronize()
                same = decoded_equals(ret, dec_out, inputs[0])
                del ret
                if in_place is False:
                    enc_errors[form] = f"not written in place (returned {size} B elsewhere; decodes {same})"
                    continue
                ok &= same
                enc_outs = objs
                rec["encode_out"] = f"preallocated ({form})"
                rec["compressed_bytes_preallocated"] = size
                rec["roundtrip_preallocated"] = same
                break
            except Exception as e:  # noqa: BLE001
                enc_errors[form] = repr(e)
    if enc_errors:
        rec["note_encode_out"] = enc_errors
    if enc_outs is None:
        rec["encode_out"] = "nvcomp-allocated (allocation inside timed call)"

    if enc_outs is not None:
        enc = time_runs(torch, stream, args.warmup, args.runs, lambda i: encode(arrs[i % 2], enc_outs[i % 2]))
    else:
        enc = time_runs(torch, stream, args.warmup, args.runs, lambda i: encode(arrs[i % 2]))
    last = []

    def dec_op(i):
        last[:] = [decode(comps[i % 2], dec_out)]

    dec = time_runs(torch, stream, args.warmup, args.runs, dec_op)
    stream.synchronize()
    # Both copies hold the same data, so the last timed decode must equal either input.
    same = decoded_equals(last[0], dec_out, inputs[0])
    ok &= same
    if not same:
        rec["note_roundtrip_after_timing"] = "output after timed decodes != input"
    del last

    rec["roundtrip_ok"] = ok
    rec["encode"] = enc
    rec["decode"] = dec
    rec["encode_gb_s"] = gbps(n, enc)
    rec["decode_gb_s"] = gbps(n, dec)
    del comps, enc_outs, arrs, codec
    return rec


# ---------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------


def device_info(torch) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    info["device"] = p.name
    info["sm"] = f"{p.major}{p.minor}"
    info["memory_gib"] = round(p.total_memory / 2**30, 1)
    try:
        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        info["driver"] = None
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", required=True, help="KV safetensors fixture")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--min-bytes", type=int, default=1 << 30, help="tile to at least this many bytes (default 1 GiB)")
    ap.add_argument("--tile", choices=["cache", "tensor"], default="cache",
                    help="cache: repeat the whole concatenated cache (default); tensor: repeat each "
                         "tensor along tokens in place, the byte order of xtask's ExANS bench")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--variants", default="all", help="comma-separated variant names, or 'all'")
    ap.add_argument("--allocator", choices=["torch", "nvcomp"], default="torch",
                    help="device memory for nvCOMP: torch's caching allocator (default) or nvCOMP's own")
    args = ap.parse_args()

    result: dict = {"input": args.input, "tile": args.tile, "runs": args.runs, "warmup": args.warmup,
                    "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "variants": []}

    def write_json():
        if args.json:
            d = os.path.dirname(args.json)
            if d:
                os.makedirs(d, exist_ok=True)
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)

    tensors = load_kv_tensors(args.input)
    raw = b"".join(b for _, b in tensors)
    copies = copies_for(len(raw), args.min_bytes)
    n = copies * len(raw)
    label = f"{os.path.basename(args.input).removesuffix('.safetensors')} x{copies}"
    result.update({"label": label, "tensors": len(tensors), "fixture_bytes": len(raw), "copies": copies,
                   "uncompressed_bytes": n, "values": n // 2})
    print(f"[nvcomp-bench] {args.input}: {len(tensors)} tensors, {len(raw)} B, tiled x{copies} ({args.tile}) "
          f"= {n} B ({n / 1e9:.3f} GB)", flush=True)

    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        print("[nvcomp-bench] torch sees no CUDA device", file=sys.stderr)
        write_json()
        return 1
    result["env"] = device_info(torch)
    try:
        nvcomp = import_nvcomp()
    except Exception as e:  # noqa: BLE001
        print(f"[nvcomp-bench] cannot import nvidia.nvcomp: {e!r}", file=sys.stderr)
        result["error"] = f"import nvidia.nvcomp: {e!r}"
        write_json()
        return 1
    result["nvcomp"] = {"version": getattr(nvcomp, "__version__", None),
                        "cuda_version": getattr(nvcomp, "__cuda_version__", None),
                        "file": getattr(nvcomp, "__file__", None)}
    try:
        import nvidia.libnvcomp as libnv  # noqa: PLC0415

        result["nvcomp"]["libnvcomp_wheel"] = getattr(libnv, "__version__", None)
    except Exception:  # noqa: BLE001
        pass
    print(f"[nvcomp-bench] nvcomp {result['nvcomp']['version']} (CUDA {result['nvcomp']['cuda_version']}, "
          f"wheel {result['nvcomp'].get('libnvcomp_wheel')}), torch {torch.__version__}, "
          f"{result['env']['device']} sm_{result['env']['sm']}, driver {result['env']['driver']}", flush=True)

    result["allocator"] = "nvcomp default"
    if args.allocator == "torch":
        try:
            result["allocator"] = use_torch_allocator(torch, nvcomp)
        except Exception as e:  # noqa: BLE001
            result["allocator"] = f"nvcomp default (set_device_allocator failed: {e!r})"
    print(f"[nvcomp-bench] allocator: {result['allocator']}", flush=True)

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        if args.tile == "cache":
            small = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to("cuda")
            big = small.repeat(copies)
        else:
            big = torch.cat([torch.frombuffer(bytearray(b), dtype=torch.uint8).to("cuda").repeat(copies)
                             for _, b in tensors])
        assert big.numel() == n and big.is_contiguous()
        # Two input copies, alternated run by run, so L2 never serves them.
        inputs = [big, big.clone()]
        stream.synchronize()

        # Device-to-device copy of the same size, in this run: bytes read + written.
        dst = torch.empty(n, dtype=torch.uint8, device="cuda")
        copy = time_runs(torch, stream, 3, args.runs, lambda i: dst.copy_(inputs[i % 2]))
        copy_gb_s = gbps(2 * n, copy)
        del dst
        torch.cuda.empty_cache()
        result["copy"] = {"gb_s": copy_gb_s, **copy}
        print(f"[nvcomp-bench] device-to-device copy: {copy_gb_s:.0f} GB/s (read+write), median of {args.runs}",
              flush=True)

        wanted = None if args.variants == "all" else set(args.variants.split(","))
        failed_roundtrip = False
        for name, opts in variants(nvcomp):
            if wanted is not None and name not in wanted:
                continue
            try:
                rec = run_variant(torch, nvcomp, stream, name, opts, inputs, args)
                bound = copy_gb_s / (1 + 1 / rec["ratio"])
                rec["roofline_gb_s"] = bound
                rec["encode_frac_roofline"] = rec["encode_gb_s"] / bound
                rec["decode_frac_roofline"] = rec["decode_gb_s"] / bound
                failed_roundtrip |= not rec["roundtrip_ok"]
                print(f"[nvcomp-bench] {name:<15} ratio {rec['ratio']:.4f}  enc {rec['encode_gb_s']:7.1f} GB/s "
                      f"({100 * rec['encode_frac_roofline']:.1f}%)  dec {rec['decode_gb_s']:7.1f} GB/s "
                      f"({100 * rec['decode_frac_roofline']:.1f}%)  roofline {bound:.0f}  "
                      f"round trip {'ok' if rec['roundtrip_ok'] else 'DIFFERS'}  [enc out {rec['encode_out']}; "
                      f"dec out {rec['decode_out']}; dcfg {rec['decompression_config']}]", flush=True)
                notes = {k: v for k, v in rec.items() if k.startswith("note")}
                for k, v in notes.items():
                    print(f"[nvcomp-bench]   {k}: {v}", flush=True)
            except Exception as e:  # noqa: BLE001
                rec = {"variant": name, "options": describe_opts(opts), "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc(limit=4)}
                print(f"[nvcomp-bench] {name:<15} FAILED (nvcomp {result['nvcomp']['version']}): "
                      f"{type(e).__name__}: {e}", flush=True)
            result["variants"].append(rec)
            write_json()
            stream.synchronize()
            torch.cuda.empty_cache()

    ok_rows = [r for r in result["variants"] if "error" not in r]
    print()
    print(f"nvCOMP {result['nvcomp']['version']} ANS, {label} ({n / 1e9:.3f} GB, tile={args.tile}), "
          f"{result['env']['device']}; copy_bw {copy_gb_s:.0f} GB/s")
    print("| variant | ratio | encode GB/s | decode GB/s | roofline GB/s | enc % roof | dec % roof | round trip |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in result["variants"]:
        if "error" in r:
            print(f"| {r['variant']} | failed: {r['error'][:60].replace('|', '/')} | | | | | | |")
            continue
        print(f"| {r['variant']} | {r['ratio']:.4f} | {r['encode_gb_s']:.1f} | {r['decode_gb_s']:.1f} | "
              f"{r['roofline_gb_s']:.0f} | {100 * r['encode_frac_roofline']:.1f}% | "
              f"{100 * r['decode_frac_roofline']:.1f}% | {'ok' if r['roundtrip_ok'] else 'DIFFERS'} |")
    write_json()
    if args.json:
        print(f"[nvcomp-bench] wrote {args.json}")
    return 0 if ok_rows and not failed_roundtrip else 1


if __name__ == "__main__":
    sys.exit(main())
