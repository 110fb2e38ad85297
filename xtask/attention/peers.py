#!/usr/bin/env python3
"""The BF16 decode-attention peers for `cargo xtask bench-attention --peers <json>`.

torch SDPA (dense KV, enable_gqa) and, when importable, FlashInfer's paged decode
(BatchDecodeWithPagedKVCacheWrapper, NHD pages of 16 tokens, tensor cores off and on),
timed like the Rust bench: CUDA events around one call, 3 warm-ups, median of --runs, the
L2 flushed by a 512 MiB memset and the stream held by a sleep kernel (about 2 ms) before
each run. Random BF16 values: the peers' time does not depend on them. FlashInfer's pages
are placed as bench-attention places its own: the same xorshift32 permutation (seed
0x5eed), or in order with --pages contiguous. FlashInfer runs its FA2 backend, named
(backend="fa2"), so that neither variant moves to another library behind "auto".
Writes JSON: the device, torch and FlashInfer versions, the page placement, the runs, and
the cells.

--warm builds FlashInfer's JIT modules (one per head_dim, tensor cores off and on: 15-30 s
each) in parallel processes, so that a later run finds them in its cache.
"""
import argparse
import json
import subprocess
import sys

import torch
import torch.nn.functional as F

PAGES = "shuffled"
SHAPES = {"llama3-8b": (32, 8, 128), "smollm2": (9, 3, 64), "gemma3": (4, 1, 256)}
PAGE = 16


def time_us(fn, runs, flush):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        flush.zero_()
        torch.cuda._sleep(4_000_000)  # clock cycles: about 2 ms at the H200's ~2 GHz
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def sdpa(b, s, hq, hkv, d, runs, flush):
    q = torch.randn(b, hq, 1, d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(b, hkv, s, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(b, hkv, s, d, dtype=torch.bfloat16, device="cuda")
    t = time_us(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), runs, flush)
    del q, k, v
    return t


def placement(pages):
    """bench-attention's page order: logical page i of the batch lives in physical page
    order[i]; shuffled by Fisher-Yates with xorshift32 from seed 0x5eed (its `xorshift`)."""
    order = list(range(pages))
    if PAGES == "shuffled":
        x = 0x5EED
        for i in range(pages - 1, 0, -1):
            x ^= (x << 13) & 0xFFFFFFFF
            x ^= x >> 17
            x ^= (x << 5) & 0xFFFFFFFF
            j = x % (i + 1)
            order[i], order[j] = order[j], order[i]
    return order


def flashinfer_decode(b, s, hq, hkv, d, runs, flush, tensor_cores):
    """FlashInfer's paged decode over NHD pages; returns (µs, the backend it ran)."""
    import flashinfer

    pages_per_seq = (s + PAGE - 1) // PAGE
    pages = b * pages_per_seq
    k = torch.randn(pages, PAGE, hkv, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(pages, PAGE, hkv, d, dtype=torch.bfloat16, device="cuda")
    indices = torch.tensor(placement(pages), dtype=torch.int32, device="cuda")
    indptr = torch.arange(0, b + 1, dtype=torch.int32, device="cuda") * pages_per_seq
    last = torch.full((b,), s - (pages_per_seq - 1) * PAGE, dtype=torch.int32, device="cuda")
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores,
                                                            backend="fa2")
    wrapper.plan(indptr, indices, last, hq, hkv, d, PAGE, pos_encoding_mode="NONE",
                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    q = torch.randn(b, hq, d, dtype=torch.bfloat16, device="cuda")
    t = time_us(lambda: wrapper.run(q, (k, v)), runs, flush)
    backend = getattr(wrapper, "resolved_backend", "fa2")
    del k, v, q, workspace, wrapper
    return t, backend


def warm(shapes):
    """Builds every FlashInfer module the sweep needs, one process per module, in parallel."""
    jobs = []
    for name in shapes:
        for tc in ("0", "1"):
            jobs.append(subprocess.Popen([sys.executable, __file__, "--warm-one", f"{name},{tc}"]))
    return max((j.wait() for j in jobs), default=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default="llama3-8b,smollm2,gemma3")
    ap.add_argument("--contexts", default="8192,32768,65536,131072")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--pages", choices=["shuffled", "contiguous"], default="shuffled",
                    help="FlashInfer's page placement, as bench-attention's --pages")
    ap.add_argument("--json", help="where to write the cells (needed unless --warm)")
    ap.add_argument("--warm", action="store_true", help="build FlashInfer's modules for --shapes, then exit")
    ap.add_argument("--warm-one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global PAGES
    PAGES = args.pages
    if args.warm:
        sys.exit(warm(args.shapes.split(",")))
    if args.warm_one:
        name, tc = args.warm_one.split(",")
        hq, hkv, d = SHAPES[name]
        flashinfer_decode(1, 64, hq, hkv, d, 1, torch.empty(1 << 20, dtype=torch.uint8, device="cuda"), tc == "1")
        return
    if not args.json:
        ap.error("--json is needed (unless --warm)")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    try:
        import flashinfer  # noqa: F401
        have_fi = True
        fi_error = None
    except Exception as e:  # the wheel is carried only in some runs
        print(f"[peers] FlashInfer not available: {e}")
        have_fi = False
        fi_error = str(e)
    cells = []
    for name in args.shapes.split(","):
        hq, hkv, d = SHAPES[name]
        for b in map(int, args.batches.split(",")):
            for s in map(int, args.contexts.split(",")):
                cell = {"shape": name, "batch": b, "context": s, "sdpa_us": None,
                        "flashinfer_us": None, "flashinfer_tc_us": None, "flashinfer_backends": []}
                try:
                    cell["sdpa_us"] = sdpa(b, s, hq, hkv, d, args.runs, flush)
                except Exception as e:
                    print(f"[peers] {name} B={b} S={s} SDPA: {e}")
                for key, tc in (("flashinfer_us", False), ("flashinfer_tc_us", True)):
                    if have_fi:
                        try:
                            cell[key], backend = flashinfer_decode(b, s, hq, hkv, d, args.runs, flush, tc)
                            cell["flashinfer_backends"].append(backend)
                        except Exception as e:
                            print(f"[peers] {name} B={b} S={s} FlashInfer tc={tc}: {e}")
                torch.cuda.empty_cache()
                print(f"[peers] {cell}")
                cells.append(cell)
    fi_version = None
    if have_fi:
        import flashinfer
        fi_version = getattr(flashinfer, "__version__", "unknown")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "flashinfer": fi_version,
           "flashinfer_error": fi_error, "pages": args.pages, "runs": args.runs, "cells": cells}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
