"""hoist.torch: fill an existing torch.nn.Module's parameters and buffers in place from hoist.

    import hoist.torch
    report = hoist.torch.load_into(module, model="/models/qwen3-4b", tp=2, rank=1)  # embedded
    report = hoist.torch.load_into(module, attach="/run/hoist/rank-1.sock")         # resident

The module's state_dict() names and per-rank shapes must be those of hoist's output layout
(docs/LAYOUT.md; the fused layout is vLLM's parameter names and shapes). Before anything is
written, every problem is collected and raised together as one LoadIntoError: names the module
has and hoist did not load (missing), names hoist loaded and the module lacks (unexpected), and
names whose shapes differ (mis-shaped). Names the module ties together (lm_head.weight and
model.embed_tokens.weight as one Parameter) count as one entry, filled by any of its names.

Zero copy: a Parameter whose dtype, device and shape equal the loaded tensor's is pointed at
hoist's memory (the arena, or the daemon's mapping when attached) instead of being copied
(share="auto"; share=True makes that a requirement, share=False always copies). Everything
else is copied with dtype conversion (e.g. BF16 weights into a float32 module). Copies are
made under torch.no_grad(); when nothing is shared the hoist weights are released at the end.

Failure: LoadIntoError (a ValueError) for a module that does not match, RuntimeError from hoist
for a failed load or attach (its message names the file, tensor, rank or socket).
Threading: call from the thread that owns the module (and MPI, for a collective load)."""
import fnmatch
import time

import torch

import hoist as _hoist

__all__ = ["LoadIntoError", "LoadReport", "load_into", "as_torch"]

_FP8 = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}


class LoadIntoError(ValueError):
    """The module's state_dict does not match the loaded tensors; the message lists every
    missing, unexpected and mis-shaped name. The lists are also attributes."""

    def __init__(self, message, missing, unexpected, misshaped, unshareable):
        super().__init__(message)
        self.missing = missing
        self.unexpected = unexpected
        self.misshaped = misshaped
        self.unshareable = unshareable


class LoadReport:
    """What load_into did: names shared (zero copy) and copied, bytes written, seconds, hoist's
    rank and world (-1, 0 for weights= given as a dict), its phases (seconds by name), and the
    hoist Model it used (None once released)."""

    def __init__(self, model, rank, world, phases, shared, copied, copied_bytes, seconds):
        self.model = model
        self.rank = rank
        self.world = world
        self.phases = phases
        self.shared = shared
        self.copied = copied
        self.copied_bytes = copied_bytes
        self.seconds = seconds

    def __repr__(self):
        return (f"LoadReport(rank={self.rank}, world={self.world}, shared={len(self.shared)}, copied={len(self.copied)}, "
                f"copied_bytes={self.copied_bytes}, seconds={self.seconds:.3f})")


def as_torch(model):
    """dict name -> torch tensor over a hoist.Model's memory (no copy). FP8 tensors arrive as
    torch's float8 types where this torch has them, else as uint8 bytes."""
    out = {}
    for name in model.keys():
        t = model[name]
        x = torch.from_dlpack(t)
        fp8 = getattr(torch, _FP8.get(t.dtype, ""), None) if t.dtype in _FP8 else None
        out[name] = x.view(fp8) if fp8 is not None else x
    return out


def _shape(t):
    return list(t.shape)


def _alias_groups(entries):
    """Groups state_dict names that are one tensor (tied weights): same object, or same memory,
    shape, dtype and device. Returns a list of name lists in state_dict order."""
    groups, index = [], {}
    for name, t in entries.items():
        key = ("id", id(t))
        if t.numel() > 0:
            key = ("mem", t.device, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in index:
            groups[index[key]].append(name)
        else:
            index[key] = len(groups)
            groups.append([name])
    return groups


def _matches(name, patterns):
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _can_share(dst, src):
    return (isinstance(dst, torch.nn.Parameter) and dst.dtype == src.dtype
            and dst.device == src.device and dst.shape == src.shape and src.is_contiguous())


def _format_problems(where, missing, unexpected, misshaped, unshareable, limit=200):
    counts = [f"{len(missing)} missing", f"{len(unexpected)} unexpected",
              f"{len(misshaped)} mis-shaped"]
    if unshareable:
        counts.append(f"{len(unshareable)} not shareable (share=True)")
    lines = [f"hoist.torch.load_into: the module does not match the loaded tensors ({where}): "
             + ", ".join(counts)]

    def section(title, items):
        if not items:
            return
        lines.append(f"  {title}:")
        for item in items[:limit]:
            lines.append(f"    {item}")
        if len(items) > limit:
            lines.append(f"    ... and {len(items) - limit} more")

    section("missing (in the module, not loaded)", missing)
    section("unexpected (loaded, not in the module)", unexpected)
    section("mis-shaped (module vs loaded)",
            [f"{n}: module {m} vs loaded {h}" for n, m, h in misshaped])
    section("not shareable (dtype/device/shape differ)",
            [f"{n}: module {m} vs loaded {h}" for n, m, h in unshareable])
    return "\n".join(lines)


def check(module, weights, *, share="auto", allow_missing=(), ignore_unexpected=(), where=""):
    """The fill plan for `module` from `weights` (dict name -> torch tensor): a list of
    (destination tensor, source tensor, share?) per alias group. Raises LoadIntoError listing
    every problem; writes nothing."""
    entries = module.state_dict(keep_vars=True)
    missing, misshaped, unshareable, plan = [], [], [], []
    claimed = set()
    for group in _alias_groups(entries):
        present = [n for n in group if n in weights]
        claimed.update(present)
        if not present:
            if not any(_matches(n, allow_missing) for n in group):
                missing.append(" = ".join(group) if len(group) > 1 else group[0])
            continue
        dst = entries[group[0]]
        for name in present:
            if _shape(weights[name]) != _shape(dst):
                misshaped.append((name, _shape(dst), _shape(weights[name])))
        if len(present) > 1:  # tied in the module, two tensors in hoist: which one wins?
            misshaped.append((" = ".join(present), "one tied tensor",
                              f"{len(present)} separate tensors"))
            continue
        src = weights[present[0]]
        shared = share is not False and _can_share(dst, src)
        if share is True and not shared:
            unshareable.append((present[0], f"{dst.dtype} {dst.device} {_shape(dst)}",
                                f"{src.dtype} {src.device} {_shape(src)}"))
        plan.append((present[0], dst, src, shared))
    unexpected = sorted(n for n in weights if n not in claimed and n not in entries
                        and not _matches(n, ignore_unexpected))
    if missing or unexpected or misshaped or unshareable:
        raise LoadIntoError(_format_problems(where, missing, unexpected, misshaped, unshareable),
                            missing, unexpected, misshaped, unshareable)
    return plan


def fill(plan):
    """Writes a plan from check(): points shared Parameters at hoist's memory and copies the
    rest. Returns (shared names, copied names, copied bytes)."""
    shared, copied, nbytes = [], [], 0
    with torch.no_grad():
        for name, dst, src, share in plan:
            if share:
                dst.data = src
                shared.append(name)
            else:
                dst.copy_(src)
                copied.append(name)
                nbytes += dst.numel() * dst.element_size()
    return shared, copied, nbytes


def _module_device(module):
    for t in module.state_dict(keep_vars=True).values():
        return t.device
    return torch.device("cpu")


def _default_rank():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def load_into(module, model=None, *, weights=None, attach=None, topology="", rank=None, comm=None,
              device=None, timeout_ms=10000, share="auto", allow_missing=(), ignore_unexpected=(),
              **options):
    """Fills `module` (its state_dict: parameters and persistent buffers) in place and returns a
    LoadReport. One source:

      weights=   a hoist.Model already loaded or attached (kept: the caller owns it);
      attach=    a `hoist serve` rank's socket path (zero copy where dtype and device match);
      model= / topology=  an embedded load of this process's rank (**options: hoist.load's
                 job options, e.g. tp, ep, dp, layout, read, threads, verify; comm=None, "world"
                 or an mpi4py communicator; rank defaults to torch.distributed's rank; device
                 defaults to "host" for a module on the CPU, hoist's auto otherwise).

    allow_missing / ignore_unexpected: fnmatch patterns of names to let through."""
    t0 = time.perf_counter()
    sources = sum(x is not None and x != "" for x in (weights, attach, model or topology or None))
    if sources != 1:
        raise ValueError("load_into takes exactly one source: weights=, attach= or model=/"
                         "topology=")
    owned = weights is None
    if attach is not None:
        hmodel = _hoist.attach(attach, timeout_ms=timeout_ms)
        where = f"attached to {attach}"
    elif weights is not None:
        hmodel = weights
        where = "the given weights"
    else:
        if device is None and _module_device(module).type == "cpu":
            device = "host"
        hmodel = _hoist.load(model or "", topology=topology or "",
                             rank=_default_rank() if rank is None else rank, device=device,
                             comm=comm, **options)
        where = f"{model or topology}"
    if isinstance(hmodel, dict):
        tensors, rank_note, info = hmodel, "", (-1, 0, {})
    else:
        tensors = as_torch(hmodel)
        rank_note = f", rank {hmodel.rank} of {hmodel.world}"
        info = (hmodel.rank, hmodel.world, hmodel.phases)
    try:
        plan = check(module, tensors, share=share, allow_missing=allow_missing,
                     ignore_unexpected=ignore_unexpected, where=where + rank_note)
        shared, copied, nbytes = fill(plan)
    except BaseException:
        if owned:
            del tensors
            hmodel.release()
        raise
    del plan, tensors
    if owned and not shared:
        hmodel.release()
        hmodel = None
    return LoadReport(hmodel, *info, shared, copied, nbytes, time.perf_counter() - t0)
