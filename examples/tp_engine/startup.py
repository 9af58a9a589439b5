"""The example engine's start-up line items and its warm-up (run.py --overlap, bench/overlap.sh).

Phases: process_start (from the kernel's start of this process to main), cuda_context (the first
CUDA call), hoist_plan_arena (until hoist's tensors have addresses: the whole load when not
overlapped), weights (until every byte is in and the verdict is known), warm_up, first_token
(from the start of decoding to the first token on the host) and total (process start to first
token)."""
import os
import time

import torch

from layers import Weight


def process_age_s():
    """Seconds since the kernel started this process (/proc/self/stat field 22)."""
    with open("/proc/self/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])
    with open("/proc/uptime") as fh:
        uptime = float(fh.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


class Phases:
    """Line items on one clock: perf_counter, anchored at the process's start."""

    def __init__(self):
        now = time.perf_counter()
        self.origin = now - process_age_s()
        self.items = {"process_start": now - self.origin}
        self.marks = {}

    def mark(self, name):
        self.marks[name] = time.perf_counter()

    def since(self, name, mark):
        self.items[name] = time.perf_counter() - self.marks[mark]

    def add(self, name, seconds):
        self.items[name] = self.items.get(name, 0.0) + seconds

    def total(self):
        self.items["total"] = time.perf_counter() - self.origin

    def print(self, log):
        for name, s in self.items.items():
            print(f"phase {name} {s:.4f}", flush=True)
        log("start-up: " + ", ".join(f"{k} {v:.3f}s" for k, v in self.items.items()))


class HostTimes:
    """Host seconds spent in each kind of call of the warm-up (allocation, eager step, capture
    begin/step/end, the final wait): a call that blocks on the load shows here by name."""

    def __init__(self):
        self.items = {}
        self.at = time.perf_counter()

    def tick(self, name):
        now = time.perf_counter()
        self.items[name] = self.items.get(name, 0.0) + now - self.at
        self.at = now

    def __str__(self):
        return ", ".join(f"{k} {v:.3f}s" for k, v in self.items.items())


def warm_up(engine, sizes, repeats, device, times=None):
    """For each batch size, every 2-D weight's projection of a zero batch: one CUDA graph per
    size and repeat on GPUs (kept until the engine decodes), plain calls on the CPU. Reads the
    weights' memory, trusts none of it: the results are discarded. `times` (a HostTimes), if
    given, collects the host seconds of each kind of call."""
    weights = [m for m in engine.modules() if isinstance(m, Weight) and m.weight.dim() == 2]
    graphs = []
    times = times or HostTimes()
    for _ in range(max(1, repeats)):
        for b in sizes:
            inputs = {}
            for m in weights:
                k = m.weight.shape[1]
                if k not in inputs:
                    inputs[k] = torch.zeros(b, k, dtype=m.weight.dtype, device=device)
            times.tick("alloc")

            def step():
                return [torch.nn.functional.linear(inputs[m.weight.shape[1]], m.weight)
                        for m in weights]

            if device.type == "cuda":
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    step()  # allocations and cuBLAS handles outside the capture
                torch.cuda.current_stream().wait_stream(side)
                times.tick("eager")
                g = torch.cuda.CUDAGraph()
                # capture_begin on a side stream rather than `with torch.cuda.graph(g)`, whose
                # entry synchronizes the whole device (hoist's copy streams too, i.e. waits for
                # the weights); thread_local: hoist's threads keep calling CUDA meanwhile.
                with torch.cuda.stream(side):
                    g.capture_begin(capture_error_mode="thread_local")
                    times.tick("capture_begin")
                    outs = step()
                    times.tick("capture")
                    g.capture_end()
                    times.tick("capture_end")
                torch.cuda.current_stream().wait_stream(side)
                graphs.append((g, inputs, outs))
            else:
                step()
                times.tick("eager")
    if device.type == "cuda":
        # This stream only: torch.cuda.synchronize() would wait for hoist's copy streams too,
        # i.e. for the weights, which is what the warm-up must not do.
        torch.cuda.current_stream().synchronize()
        times.tick("final_wait")
    return graphs
