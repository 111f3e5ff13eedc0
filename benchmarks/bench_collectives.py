"""All-reduce and all-to-all bus bandwidth and latency through torch.distributed (NCCL).

One process per GPU (torch.multiprocessing), for every world size 2..N (N = the GPUs
torch sees, or --max-world), every message size from --min-bytes to --max-bytes in
powers of 2. Per size: a correctness check, warm-up, then timed iterations between
two CUDA events on each rank (nccl-tests' way: one loop of back-to-back collectives,
time / iterations), the slowest rank's figure reported. With --graph the loop is captured
once in a CUDA graph and its replays are timed: no Python launch cost, as in SGLang's decode. Bandwidth as nccl-tests
(doc/PERFORMANCE.md) defines it, with S the message size in bytes (the whole buffer):

    algbw                  = S / time
    all_reduce     busbw   = algbw * 2 (n - 1) / n
    all_to_all     busbw   = algbw * (n - 1) / n        (each rank keeps S / n of its own)
    sendrecv       busbw   = algbw                      (ring exchange: send S to next, receive S from previous)

NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are forced into this process's environment before torch starts, so
the spawned ranks inherit them whatever the caller exported.

    python3 benchmarks/bench_collectives.py --out results.json            # GPUs, NCCL, eager launches
    python3 benchmarks/bench_collectives.py --graph --out graph.json      # the same as CUDA graph replays
    python3 benchmarks/bench_collectives.py --backend gloo --device cpu \\
        --max-world 2 --max-bytes 65536 --iters 5 --out /tmp/c.json       # logic check, no GPU

Writes one JSON document (machine, date, versions, environment, every figure) and prints a
table per world size.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)

import torch  # noqa: E402 (after the environment above)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

OPS = ("all_reduce", "all_to_all", "sendrecv")
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


def sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def iters_for(nbytes: int, base: int) -> int:
    """Fewer iterations for large messages (each already runs for a millisecond or more)."""
    if nbytes >= 64 << 20:
        return max(5, base // 10)
    if nbytes >= 8 << 20:
        return max(10, base // 4)
    return base


def _op(name, buf, out, rank, world):
    if name == "all_reduce":
        dist.all_reduce(buf)
    elif name == "all_to_all":
        dist.all_to_all_single(out, buf)
    else:
        ops = [
            dist.P2POp(dist.isend, buf, (rank + 1) % world),
            dist.P2POp(dist.irecv, out, (rank - 1) % world),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()


def _check(name, buf, out, rank, world, device) -> bool:
    """Run the op once on known data and compare with what it must give."""
    n = buf.numel()
    if name == "all_reduce":
        buf.copy_(torch.arange(n, device=device, dtype=buf.dtype) % 13 + rank)
        _op(name, buf, out, rank, world)
        want = (torch.arange(n, device=device, dtype=buf.dtype) % 13) * world + world * (world - 1) / 2
        return bool(torch.equal(buf, want))
    chunk = n // world
    # element i of rank r's input: r * 1000 + i // chunk (destination rank), so the output's
    # block j must hold j * 1000 + rank
    buf.copy_(rank * 1000 + torch.arange(n, device=device) // chunk)
    out.fill_(-1)
    _op(name, buf, out, rank, world)
    if name == "all_to_all":
        want = (torch.arange(n, device=device) // chunk) * 1000 + rank
    else:
        prev = (rank - 1) % world
        want = prev * 1000 + torch.arange(n, device=device) // chunk
    return bool(torch.equal(out, want.to(out.dtype)))


def _capture(name, buf, out, rank, world, iters):
    """A CUDA graph of `iters` back-to-back collectives (how SGLang runs its decode steps)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            _op(name, buf, out, rank, world)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            _op(name, buf, out, rank, world)
    torch.cuda.synchronize()
    return graph


def _timed(name, buf, out, rank, world, iters, device, graph=None) -> float:
    """Seconds per collective: one loop of `iters` between events (CPU clock on CPU)."""
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if graph is not None:
            graph.replay()
        else:
            for _ in range(iters):
                _op(name, buf, out, rank, world)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        _op(name, buf, out, rank, world)
    return (time.perf_counter() - t0) / iters


def worker(rank: int, world: int, args, port: int, queue) -> None:
    os.environ.update(NO_MULTICAST)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group(args.backend, rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(args.backend, rank=rank, world_size=world)
    dtype = getattr(torch, args.dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    rows = []
    try:
        for op in args.ops:
            for nbytes in sizes(args.min_bytes, args.max_bytes):
                n = nbytes // esize
                n -= n % world  # all-to-all needs equal blocks
                buf = torch.empty(n, dtype=dtype, device=device)
                out = torch.empty_like(buf)
                ok = _check(op, buf, out, rank, world, device)
                buf.normal_() if dtype.is_floating_point else buf.random_(0, 100)
                iters = iters_for(nbytes, args.iters)
                for _ in range(args.warmup):
                    _op(op, buf, out, rank, world)
                graph = _capture(op, buf, out, rank, world, iters) if args.graph else None
                trials = [_timed(op, buf, out, rank, world, iters, device, graph) for _ in range(args.trials)]
                # every rank's figures to rank 0: the slowest rank is the collective's time
                t = torch.tensor([min(trials), max(trials), float(ok)], dtype=torch.float64)
                gathered = [torch.zeros_like(t) for _ in range(world)] if rank == 0 else None
                if args.device == "cuda":
                    tt = t.to(device)
                    allt = [torch.zeros_like(tt) for _ in range(world)]
                    dist.all_gather(allt, tt)
                    gathered = [x.cpu() for x in allt]
                else:
                    allt = [torch.zeros_like(t) for _ in range(world)]
                    dist.all_gather(allt, t)
                    gathered = allt
                if rank == 0:
                    best = max(float(g[0]) for g in gathered)  # best trial, slowest rank
                    worst = max(float(g[1]) for g in gathered)
                    real_bytes = n * esize
                    algbw = real_bytes / best / 1e9
                    rows.append(
                        {
                            "op": op,
                            "world_size": world,
                            "bytes": real_bytes,
                            "dtype": args.dtype,
                            "iters": iters,
                            "cuda_graph": bool(args.graph),
                            "trials": args.trials,
                            "time_us": round(best * 1e6, 3),
                            "time_us_worst_trial": round(worst * 1e6, 3),
                            "algbw_gbs": round(algbw, 4),
                            "busbw_gbs": round(algbw * BUS_FACTOR[op](world), 4),
                            "correct": all(float(g[2]) == 1.0 for g in gathered),
                        }
                    )
                del buf, out, graph
        if rank == 0:
            queue.put({"rows": rows})
    except Exception as exc:  # report, do not hang the others' spawn
        if rank == 0:
            queue.put({"rows": rows, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> dict:
    info = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        n = torch.cuda.device_count()
        info["peer_access"] = {
            f"{i}->{j}": torch.cuda.can_device_access_peer(i, j) for i in range(n) for j in range(n) if i != j
        }
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.split()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            info["driver"] = None
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--min-world", type=int, default=2)
    ap.add_argument("--max-world", type=int, default=0, help="0: every GPU torch sees")
    ap.add_argument("--min-bytes", type=int, default=8 << 10)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument(
        "--graph", action="store_true", help="time replays of a CUDA graph of the iterations (CUDA only)"
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    if args.graph and args.device != "cuda":
        ap.error("--graph needs --device cuda")
    for op in args.ops:
        if op not in OPS:
            ap.error(f"unknown op {op!r}; known: {', '.join(OPS)}")
    top = args.max_world or (torch.cuda.device_count() if args.device == "cuda" else 2)
    doc = {
        "schema": "sglang-layouts/collectives/v1",
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "environment": {
            k: os.environ.get(k)
            for k in sorted(set(NO_MULTICAST) | {k for k in os.environ if k.startswith("NCCL_")})
        },
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "method": {
            "backend": args.backend,
            "cuda_graph": bool(args.graph),
            "timing": "per trial: one loop of `iters` back-to-back collectives between two CUDA events on each rank, "
            "time / iters; time_us = the best trial of the slowest rank",
            "warmup": args.warmup,
            "busbw": {"all_reduce": "algbw * 2(n-1)/n", "all_to_all": "algbw * (n-1)/n", "sendrecv": "algbw"},
            "bytes": "the whole buffer of one rank (nccl-tests' size)",
        },
        "results": [],
        "errors": [],
    }
    ctx = mp.get_context("spawn")
    for world in range(args.min_world, top + 1):
        queue = ctx.Queue()
        t0 = time.time()
        procs = mp.start_processes(
            worker, args=(world, args, free_port(), queue), nprocs=world, join=False, start_method="spawn"
        )
        result = None
        try:
            result = queue.get(timeout=600)
        except Exception as exc:  # queue.Empty or a dead rank
            doc["errors"].append(f"world {world}: no result ({type(exc).__name__}: {exc})")
        try:
            procs.join()
        except Exception as exc:
            doc["errors"].append(f"world {world}: {type(exc).__name__}: {str(exc)[:500]}")
        if result:
            doc["results"] += result["rows"]
            if result.get("error"):
                doc["errors"].append(f"world {world}: {result['error']}")
        print(f"world {world}: {time.time() - t0:.1f} s", file=sys.stderr)
        with open(args.out, "w") as f:  # after every world size: a later failure keeps the earlier figures
            json.dump(doc, f, indent=1)
    for world in sorted({r["world_size"] for r in doc["results"]}):
        print(f"\n# world size {world} ({args.backend}, {args.dtype}); time us / algbw GB/s / busbw GB/s")
        for op in args.ops:
            for r in (r for r in doc["results"] if r["op"] == op and r["world_size"] == world):
                flag = "" if r["correct"] else "  WRONG RESULT"
                print(
                    f"{op:11s} {r['bytes']:>11d} B {r['time_us']:>10.2f} us"
                    f" {r['algbw_gbs']:>9.2f} {r['busbw_gbs']:>9.2f}{flag}"
                )
    for e in doc["errors"]:
        print("ERROR", e)
    return 1 if doc["errors"] or not doc["results"] else 0


if __name__ == "__main__":
    sys.exit(main())
