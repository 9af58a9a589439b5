"""The example engine: start with hoist, then greedily decode a few tokens, tensor-parallel.
Families (models.py): Qwen3, Qwen3-MoE, Mixtral, GPT-OSS (BF16 experts, hoist's hf layout),
DeepSeek-V2 (MLA); config.json's architectures picks one, and the hoist layout it binds to.

    # CPU, gloo, hoist's host backend; hoist plans once on rank 0 over MPI_COMM_WORLD:
    mpirun -np 2 python3 examples/tp_engine/run.py --model /models/qwen3-tiny --tp 2
    # the same under torchrun (no MPI: each rank loads its own part of the plan; Debian's
    # torch 1.13 on Python 3.11 also needs --redirects 1 --tee 1, its default "0" breaks):
    torchrun --nproc_per_node 2 examples/tp_engine/run.py --model Qwen/Qwen3-4B --tp 2
    # GPUs (NCCL), a Qwen3-MoE with experts owned under expert parallelism:
    mpirun -np 2 python3 examples/tp_engine/run.py --model M --ep 2 --device cuda --dtype bfloat16
    # weights resident in `hoist serve` (zero copy where dtype and device match):
    mpirun -np 2 python3 examples/tp_engine/run.py --model M --tp 2 --attach /run/hoist

--model is a folder or a Hugging Face repo id (owner/name[@revision]) in the local cache; it
gives config.json and, without --attach, the weights. Rank 0 prints the tokens; --out FILE.npz
writes tokens, the prompt's logits and each chosen token's logits (float32, padded vocab rows
dropped). Exit codes: 0 ok, 1 a load or run failure, 2 a usage error (bad sizes or flags).

--overlap (embedded loads): hoist.load_async returns once the arena exists; the engine binds
its parameters to the pending tensors (zero copy: needs --dtype bfloat16, as the checkpoint), runs
its warm-up while the bytes stream, then orders its stream after the last byte (stream_wait on
CUDA) and waits for hoist's verdict before decoding. The warm-up (both modes, --warmup-sizes):
for each batch size, every 2-D weight's projection of a zero batch, captured as one CUDA graph per
size on GPUs (plain calls on the CPU); results discarded. It stands in for an engine's graph
capture and compilation: the example's own decode (a growing KV cache) does not replay these
graphs. Rank 0 prints its start-up line items as `phase NAME SECONDS` lines (bench/overlap.sh)."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import hoist
import hoist.torch
import models
import startup
from layers import Parallel

DEFAULT_PROMPT = "3,17,92,250,511,7,800,42"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="folder or owner/name[@revision]")
    p.add_argument("--topology", default="", help="hoist topology file (its flags override)")
    p.add_argument("--tp", type=int, default=0, help="tensor parallel (default: world / dp)")
    p.add_argument("--ep", type=int, default=0, help="expert parallel = world (0: off)")
    p.add_argument("--placement", default="linear", choices=["linear", "round_robin"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="token ids, comma-separated")
    p.add_argument("--tokens", type=int, default=6, help="tokens to generate")
    p.add_argument("--attach", default="", help="socket dir of `hoist serve` (rank-R.sock)")
    p.add_argument("--hoist-comm", default="auto", choices=["auto", "world", "solo"],
                   help="auto: MPI_COMM_WORLD under mpirun, each rank alone otherwise")
    p.add_argument("--share", default="auto", choices=["auto", "yes", "no"],
                   help="point parameters at hoist's memory where dtype/device match")
    p.add_argument("--threads", type=int, default=None, help="hoist fill threads")
    p.add_argument("--out", default="", help="rank 0 writes tokens and logits here (.npz)")
    p.add_argument("--overlap", action="store_true",
                   help="warm up while the weights stream (hoist.load_async)")
    p.add_argument("--warmup-sizes", default="1,2,4,8,16,32,64,128",
                   help="batch sizes of the warm-up (comma-separated; empty: none)")
    p.add_argument("--warmup-repeats", type=int, default=1,
                   help="times each batch size's warm-up is captured (a longer warm-up)")
    return p.parse_args(argv)


def launch_env():
    """(rank, world, local_rank, launcher) from torchrun's or Open MPI's environment."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), "torchrun"
    if "OMPI_COMM_WORLD_RANK" in env:
        rank, world = int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
        local = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", 0))
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29531")
        env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"] = str(rank), str(world), str(local)
        return rank, world, local, "mpirun"
    return 0, 1, 0, "single"


class Log:
    def __init__(self, rank):
        self.rank, self.t0 = rank, time.perf_counter()

    def __call__(self, msg):
        print(f"[rank {self.rank} {time.perf_counter() - self.t0:7.3f}s] {msg}", flush=True)


def fail(log, code, msg):
    log(f"error: {msg}")
    sys.stdout.flush()
    os._exit(code)  # without waiting for peers that may be stuck in a collective


def load_weights(args, engine, log, rank, world, tp, launcher, share, phases):
    """hoist filling the engine: attached, embedded, or (--overlap) embedded asynchronously, the
    parameters bound to the pending tensors. Returns (report, pending hoist model or None)."""
    if args.attach:
        return hoist.torch.load_into(engine, attach=os.path.join(
            args.attach, f"rank-{rank}.sock"), share=share), None
    comm = {"world": "world", "solo": None}.get(
        args.hoist_comm, "world" if launcher == "mpirun" else None)
    options = dict(topology=args.topology, tp=tp, ep=args.ep or None,
                   dp=None if args.ep else world // tp, placement=args.placement, rank=rank,
                   layout=engine.LAYOUT, comm=comm,
                   device="cuda" if args.device == "cuda" else "host", threads=args.threads)
    if not args.overlap:
        return hoist.torch.load_into(engine, model=args.model, share=share, **options), None
    pending = hoist.load_async(args.model, **options)
    phases.since("hoist_plan_arena", "hoist")
    report = hoist.torch.load_into(engine, weights=pending, share=True)
    log(f"hoist: {len(report.shared)} parameters bound to pending tensors "
        f"({len(pending.layers)} layer groups streaming)")
    return report, pending


def start(args, log, rank, world, local, launcher, phases):
    """torch.distributed, the model skeleton, then hoist filling it. Returns the engine."""
    backend = "nccl" if args.device == "cuda" else "gloo"
    device = torch.device(f"cuda:{local}" if args.device == "cuda" else "cpu")
    phases.mark("cuda")
    if args.device == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.init()
        torch.zeros(1, device=device)
        phases.since("cuda_context", "cuda")
    if world > 1:
        dist.init_process_group(backend, rank=rank, world_size=world)
    log(f"torch.distributed: {backend}, world {world} ({launcher})")
    try:
        model_dir = hoist.resolve_model(args.model)
        with open(os.path.join(model_dir, "config.json")) as fh:
            cfg, model_class = models.family(json.load(fh))
        tp = args.tp or (world if not args.ep else 1)
        par = Parallel(rank, world, tp, args.ep, args.placement)
        dtype = getattr(torch, args.dtype)
        engine = model_class(cfg, par, dtype, device)
    except (ValueError, OSError) as e:
        fail(log, 2, str(e))
    log(f"{cfg.model_type} ({type(engine).__name__}, hoist layout {engine.LAYOUT}) from "
        f"{model_dir}: tp {tp}, ep {args.ep}, {args.dtype} on {device}")
    if cfg.model_type != "qwen3":
        log(cfg.layer_map())

    share = {"auto": "auto", "yes": True, "no": False}[args.share]
    if args.overlap and args.attach:
        fail(log, 2, "--overlap is for embedded loads (an attach maps resident weights)")
    phases.mark("hoist")
    try:
        report, pending = load_weights(args, engine, log, rank, world, tp, launcher, share,
                                       phases)
        sizes = [int(x) for x in args.warmup_sizes.split(",") if x.strip()]
        if not pending:
            phases.since("weights", "hoist")
            phases.items.setdefault("hoist_plan_arena", phases.items["weights"])
        phases.mark("warm")
        times = startup.HostTimes()
        engine.graphs = startup.warm_up(engine, sizes, args.warmup_repeats, device, times)
        phases.since("warm_up", "warm")
        log(f"warm-up host seconds: {times}")
        if pending:
            if device.type == "cuda":  # the decode's stream waits for the last byte on the GPU
                pending.stream_wait(torch.cuda.current_stream().cuda_stream)
            pending.wait()  # collective: every rank's verdict
            phases.since("weights", "hoist")
            engine.hoist_weights = pending
    except hoist.torch.LoadIntoError as e:
        fail(log, 1, str(e))
    except RuntimeError as e:  # hoist's Status: InvalidArgument is a usage error
        fail(log, 2 if str(e).startswith("InvalidArgument") else 1, str(e))
    if report.rank != rank or report.world != world:
        fail(log, 1, f"hoist loaded rank {report.rank} of {report.world}, the engine is rank "
                     f"{rank} of {world}")
    if hoist.mpi_world()[1] > 1:
        log(f"hoist planned once over MPI_COMM_WORLD (MPI rank {hoist.mpi_world()[0]} of "
            f"{hoist.mpi_world()[1]})")
    hoist_total = report.phases.get("total", 0.0)
    log(f"hoist: {'attached' if args.attach else 'loaded'} rank {report.rank}/{report.world} "
        f"in {hoist_total:.3f}s; {len(report.shared)} tensors shared (zero copy), "
        f"{len(report.copied)} copied ({report.copied_bytes} bytes) in {report.seconds:.3f}s")
    return engine


def main(argv):
    args = parse_args(argv)
    rank, world, local, launcher = launch_env()
    log = Log(rank)
    phases = startup.Phases()
    engine = start(args, log, rank, world, local, launcher, phases)
    try:
        prompt = [int(x) for x in args.prompt.split(",") if x.strip()]
    except ValueError:
        fail(log, 2, f"--prompt '{args.prompt}' is not comma-separated token ids")
    if not prompt or min(prompt) < 0 or max(prompt) >= engine.cfg.vocab:
        fail(log, 2, f"--prompt ids must lie in [0, {engine.cfg.vocab})")
    t0 = time.perf_counter()
    phases.mark("decode")

    def first_token():
        phases.since("first_token", "decode")
        phases.total()

    tokens, prefill, steps = engine.generate(prompt, args.tokens, on_first_token=first_token)
    log(f"decoded {len(tokens)} tokens in {time.perf_counter() - t0:.3f}s")
    if rank == 0:
        phases.print(log)
        print("tokens: " + " ".join(str(t) for t in tokens), flush=True)
        if args.out:
            np.savez(args.out, tokens=np.array(tokens, dtype=np.int64),
                     prompt=np.array(prompt, dtype=np.int64), prefill=prefill.cpu().numpy(),
                     steps=steps.cpu().numpy())
            log(f"wrote {args.out}")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
