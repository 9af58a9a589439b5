"""hoist.vllm: vLLM's model loader for load format "hoist" (a thin adapter over hoist.torch).

    pip install build/python/pkg      # registers the vllm.general_plugins entry point below
    vllm serve MODEL --load-format hoist \
        --model-loader-extra-config '{"topology": "t.yaml"}'            # embedded load
    vllm serve MODEL --load-format hoist \
        --model-loader-extra-config '{"socket_dir": "/run/hoist"}'     # attach to hoist serve

NOT RUN AGAINST vLLM: vLLM cannot be installed where hoist is developed and tested. This is
written against vLLM's published loader interface (late 2025, v0.11 and later:
vllm/model_executor/model_loader/base_loader.py BaseModelLoader with download_model and
load_weights; register_model_loader in vllm.model_executor.model_loader; LoadConfig's
model_loader_extra_config). The tests check the adapter against a stub of that interface only.

What it does, per worker: BaseModelLoader.load_model builds the model on the target device, calls
load_weights, then vLLM's process_weights_after_loading. load_weights here maps the worker to a
rank of hoist's plan (hoist rank = dp_rank * tp + tp_rank; with enable_expert_parallel, ep =
tp * dp), then hoist.torch.load_into(model, ...) fills model.state_dict() in place: the fused
layout's names and shapes are vLLM's, so every parameter is filled (the sharded-state contract)
and any missing, unexpected or mis-shaped name fails the load with all of them listed.

model_loader_extra_config keys (all optional): topology (hoist topology file; its model, read,
threads... apply), socket_dir (attach to `hoist serve`: <socket_dir>/rank-<R>.sock instead of
loading), share (bool, default false: point parameters at hoist's memory instead of copying),
read, threads, placement (linear | round_robin, default linear as vLLM), verify, device.

Failure: ValueError for unknown extra-config keys or pipeline parallelism; hoist's
RuntimeError / hoist.torch.LoadIntoError otherwise. Threading: vLLM's worker thread."""
import json

import hoist
import hoist.torch

EXTRA_KEYS = ("topology", "socket_dir", "share", "read", "threads", "placement", "verify",
              "device")

HoistModelLoader = None  # the registered class, once register() ran


def check_extra(extra):
    """The extra config (a dict, or its JSON text) as a dict; ValueError naming unknown keys."""
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(EXTRA_KEYS))
    if unknown:
        raise ValueError(f"load format hoist: unknown model_loader_extra_config keys {unknown} "
                         f"(known: {', '.join(EXTRA_KEYS)})")
    return extra


def load_options(extra, model, tp_rank, tp_size, dp_rank=0, dp_size=1, expert_parallel=False,
                 pp_size=1):
    """hoist.torch.load_into's keyword arguments for one vLLM worker."""
    if pp_size != 1:
        raise ValueError(f"load format hoist: pipeline parallel ({pp_size}) is not supported")
    rank = dp_rank * tp_size + tp_rank
    share = bool(extra.get("share", False))
    if extra.get("socket_dir"):
        return {"attach": f"{extra['socket_dir']}/rank-{rank}.sock", "share": share}
    verify = extra.get("verify")
    opts = {"model": model, "topology": extra.get("topology", ""), "tp": tp_size,
            "rank": rank, "share": share, "layout": "fused",
            "placement": extra.get("placement", "linear"), "read": extra.get("read"),
            "threads": extra.get("threads"), "verify": None if verify is None else bool(verify),
            "device": extra.get("device", "cuda")}
    if expert_parallel:
        opts["ep"] = tp_size * dp_size
    else:
        opts["dp"] = dp_size
    return opts


def register():
    """The vllm.general_plugins entry point: registers load format "hoist" with vLLM."""
    global HoistModelLoader
    if HoistModelLoader is not None:
        return HoistModelLoader
    from vllm.model_executor.model_loader import register_model_loader
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    class _HoistModelLoader(BaseModelLoader):
        """Fills each worker's model.state_dict() from hoist (see the module doc)."""

        def __init__(self, load_config):
            super().__init__(load_config)
            self.extra = check_extra(getattr(load_config, "model_loader_extra_config", None))
            self.report = None

        def download_model(self, model_config):
            hoist.resolve_model(model_config.model)  # never downloads: only checks the cache

        def load_weights(self, model, model_config):
            from vllm.config import get_current_vllm_config
            from vllm.distributed import (get_tensor_model_parallel_rank,
                                          get_tensor_model_parallel_world_size)
            par = get_current_vllm_config().parallel_config
            opts = load_options(self.extra, model_config.model, get_tensor_model_parallel_rank(),
                                get_tensor_model_parallel_world_size(),
                                getattr(par, "data_parallel_rank", 0) or 0,
                                getattr(par, "data_parallel_size", 1) or 1,
                                bool(getattr(par, "enable_expert_parallel", False)),
                                getattr(par, "pipeline_parallel_size", 1) or 1)
            # vLLM then runs process_weights_after_loading (BaseModelLoader.load_model).
            self.report = hoist.torch.load_into(model, **opts)

    _HoistModelLoader.__name__ = _HoistModelLoader.__qualname__ = "HoistModelLoader"
    HoistModelLoader = register_model_loader("hoist")(_HoistModelLoader)
    return HoistModelLoader
