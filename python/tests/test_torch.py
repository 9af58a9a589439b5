"""hoist.torch.load_into on the host backend: it fills a module whose state_dict has hoist's
fused-layout names and shapes (values equal to hoist.load's, which test_hoist.py checks against
an independent reference), shares memory without a copy where dtype and device match, converts
where they differ, follows tied parameters, and rejects a wrong module with every problem named
before writing anything. Also the package layout: `import hoist` keeps hoist.load / load_async /
attach, one name per call.

Needs HOIST_BIN and HOIST_MKCKPT (ctest sets them), PYTHONPATH at the package and PyTorch."""
import os
import subprocess
import tempfile
import unittest

import torch
from torch import nn

import hoist
import hoist.torch


def module_like(shapes, dtype, fill=7.0):
    """An nn.Module whose state_dict has exactly `shapes` (name -> shape), every value `fill`."""
    root = nn.Module()
    for name, shape in shapes.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, nn.Module())
            m = getattr(m, part)
        m.register_parameter(leaf, nn.Parameter(torch.full(shape, fill, dtype=dtype),
                                                requires_grad=False))
    return root


class Fixture:
    """Checkpoints made once for the module (setUpModule) and rank 1 of tp 2 of the MoE one as
    hoist.load gives it (cloned)."""
    tmp = None
    models = {}
    moe = {}


def setUpModule():
    Fixture.tmp = tempfile.TemporaryDirectory(prefix="hoist-torch-")
    for preset in ("qwen3-tiny", "qwen3-moe-tiny"):
        path = os.path.join(Fixture.tmp.name, preset)
        subprocess.run([os.environ["HOIST_MKCKPT"], "--preset", preset, "--out", path, "--seed",
                        "5", "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
        Fixture.models[preset] = path
    m = hoist.load(Fixture.models["qwen3-moe-tiny"], tp=2, rank=1, device="host")
    Fixture.moe = {k: v.clone() for k, v in hoist.torch.as_torch(m).items()}
    m.release()


def tearDownModule():
    Fixture.tmp.cleanup()


class LoadIntoTest(unittest.TestCase):
    def setUp(self):
        self.tmp, self.models, self.moe = Fixture.tmp, Fixture.models, Fixture.moe

    def shapes(self):
        return {k: list(v.shape) for k, v in self.moe.items()}

    def test_package_keeps_the_module_api(self):
        for name in ("load", "load_async", "attach", "Model", "Tensor", "resolve_model",
                     "mpi_init", "mpi_world"):
            self.assertTrue(hasattr(hoist, name), name)
        for name in ("load_model", "load_model_async", "attach_model"):  # one name per call
            self.assertFalse(hasattr(hoist, name), name)
        self.assertEqual(hoist.mpi_world(), (0, 1))  # nothing initialised MPI here
        self.assertIn("qkv_proj", " ".join(self.moe))  # the fused layout by default

    def test_fills_a_float32_module_by_conversion(self):
        mod = module_like(self.shapes(), torch.float32)
        r = hoist.torch.load_into(mod, model=self.models["qwen3-moe-tiny"], tp=2, rank=1,
                                  threads=2)
        self.assertEqual((r.rank, r.world, len(r.shared)), (1, 2, 0))
        self.assertEqual(len(r.copied), len(self.moe))
        self.assertIsNone(r.model)  # nothing shared: hoist's arena was released
        sd = mod.state_dict()
        for name, want in self.moe.items():
            self.assertEqual(sd[name].dtype, torch.float32)
            self.assertTrue(torch.equal(sd[name], want.float()), name)  # BF16 -> F32 is exact
        w13 = sd["model.layers.0.mlp.experts.w13_weight"]
        self.assertEqual(list(w13.shape), [8, 32, 64])  # 8 experts, 2*32/2 rows each, tp 2
        self.assertGreater(float(w13.abs().min()), 0)  # hoist's content is never zero

    def test_zero_copy_when_dtype_and_device_match(self):
        mod = module_like(self.shapes(), torch.bfloat16)
        m = hoist.load(self.models["qwen3-moe-tiny"], tp=2, rank=1, device="host")
        r = hoist.torch.load_into(mod, weights=m, share=True)
        self.assertEqual((len(r.shared), len(r.copied)), (len(self.moe), 0))
        name = "model.layers.0.self_attn.qkv_proj.weight"
        self.assertEqual(mod.state_dict()[name].data_ptr(), m[name].data_ptr)  # hoist's memory
        m.release()  # the parameters keep the arena alive
        for k, want in self.moe.items():
            self.assertTrue(torch.equal(mod.state_dict()[k], want), k)
        # share=True with a dtype that differs: refused, naming the tensors, nothing written.
        mod32 = module_like(self.shapes(), torch.float32)
        with self.assertRaises(hoist.torch.LoadIntoError) as e:
            hoist.torch.load_into(mod32, model=self.models["qwen3-moe-tiny"], tp=2, rank=1,
                                  share=True)
        self.assertEqual(len(e.exception.unshareable), len(self.moe))
        self.assertIn("not shareable", str(e.exception))
        self.assertTrue(all(float(t.min()) == 7.0 for t in mod32.state_dict().values()))

    def test_tied_parameters_are_one_entry(self):
        m = hoist.load(self.models["qwen3-tiny"], tp=2, rank=0, device="host")
        want = {k: v.clone() for k, v in hoist.torch.as_torch(m).items()}
        self.assertNotIn("lm_head.weight", want)  # tied: hoist loads no lm_head
        shapes = {k: list(v.shape) for k, v in want.items()}
        mod = module_like(shapes, torch.float32)
        mod.add_module("lm_head", nn.Module())
        mod.lm_head.weight = mod.model.embed_tokens.weight  # as vLLM ties them
        self.assertIn("lm_head.weight", mod.state_dict())
        hoist.torch.load_into(mod, weights=m)
        self.assertTrue(torch.equal(mod.lm_head.weight, want["model.embed_tokens.weight"].float()))
        self.assertEqual(list(mod.lm_head.weight.shape), [512, 64])  # vocab 1000 -> 1024 / tp 2
        m.release()

    def test_wrong_module_names_every_problem_and_writes_nothing(self):
        shapes = self.shapes()
        del shapes["model.layers.1.mlp.down_proj.weight"]                   # loaded, not here
        shapes["model.layers.0.self_attn.rotary.inv_freq"] = [8]            # here, not loaded
        shapes["model.layers.2.mlp.experts.w2_weight"] = [8, 64, 32]        # wrong shape
        shapes["model.norm.weight"] = [65]                                  # wrong shape
        w13 = shapes.pop("model.layers.0.mlp.experts.w13_weight")           # renamed
        shapes["model.layers.0.mlp.experts.w13"] = w13
        mod = module_like(shapes, torch.float32)
        with self.assertRaises(hoist.torch.LoadIntoError) as e:
            hoist.torch.load_into(mod, model=self.models["qwen3-moe-tiny"], tp=2, rank=1)
        err = e.exception
        msg = str(err)
        self.assertEqual(sorted(err.missing), ["model.layers.0.mlp.experts.w13",
                                               "model.layers.0.self_attn.rotary.inv_freq"])
        self.assertEqual(err.unexpected, ["model.layers.0.mlp.experts.w13_weight",
                                          "model.layers.1.mlp.down_proj.weight"])
        self.assertEqual(sorted(n for n, _, _ in err.misshaped),
                         ["model.layers.2.mlp.experts.w2_weight", "model.norm.weight"])
        self.assertIn("2 missing, 2 unexpected, 2 mis-shaped", msg)
        self.assertIn("rank 1 of 2", msg)
        for name in err.missing + err.unexpected:
            self.assertIn(name, msg)
        self.assertIn("model.norm.weight: module [65] vs loaded [64]", msg)
        self.assertIn("model.layers.2.mlp.experts.w2_weight: module [8, 64, 32] vs loaded "
                      "[8, 64, 16]", msg)
        # Nothing was written, not even the names that matched.
        self.assertTrue(all(float(t.min()) == 7.0 == float(t.max())
                            for t in mod.state_dict().values()))
        # The same module passes once the differences are allowed for... except the shapes.
        with self.assertRaises(hoist.torch.LoadIntoError) as e:
            hoist.torch.load_into(mod, model=self.models["qwen3-moe-tiny"], tp=2, rank=1,
                                  allow_missing=["*.rotary.*", "*.w13"],
                                  ignore_unexpected=["*.w13_weight", "*.down_proj.weight"])
        self.assertEqual((e.exception.missing, e.exception.unexpected), ([], []))
        self.assertEqual(len(e.exception.misshaped), 2)

    def test_one_source_only(self):
        mod = module_like({"a": [1]}, torch.float32)
        with self.assertRaises(ValueError):
            hoist.torch.load_into(mod)
        with self.assertRaises(ValueError):
            hoist.torch.load_into(mod, model=self.models["qwen3-tiny"], attach="/nonexistent")
        with self.assertRaises(RuntimeError) as e:
            hoist.torch.load_into(mod, attach=os.path.join(self.tmp.name, "no.sock"),
                                  timeout_ms=500)
        self.assertIn("no.sock", str(e.exception))


class VllmAdapterTest(unittest.TestCase):
    """hoist.vllm against a stub of vLLM's published loader interface (vLLM is not installed
    here): registration under "hoist", the BaseModelLoader contract (download_model,
    load_weights), the worker -> hoist rank mapping, and the extra-config checks. What this
    cannot show is that a real vLLM accepts it."""

    def setUp(self):
        import abc
        import sys
        import types
        self.registry, self.saved = {}, {}
        registry = self.registry

        class BaseModelLoader(abc.ABC):
            def __init__(self, load_config):
                self.load_config = load_config

            @abc.abstractmethod
            def download_model(self, model_config):
                raise NotImplementedError

            @abc.abstractmethod
            def load_weights(self, model, model_config):
                raise NotImplementedError

        def register_model_loader(load_format):
            def wrap(cls):
                if not issubclass(cls, BaseModelLoader):
                    raise ValueError("not a BaseModelLoader")
                registry[load_format] = cls
                return cls
            return wrap

        par = types.SimpleNamespace(data_parallel_rank=0, data_parallel_size=1,
                                    enable_expert_parallel=False, pipeline_parallel_size=1)
        self.par = par
        mods = {
            "vllm": types.ModuleType("vllm"),
            "vllm.config": types.ModuleType("vllm.config"),
            "vllm.distributed": types.ModuleType("vllm.distributed"),
            "vllm.model_executor": types.ModuleType("vllm.model_executor"),
            "vllm.model_executor.model_loader": types.ModuleType("m"),
            "vllm.model_executor.model_loader.base_loader": types.ModuleType("b"),
        }
        mods["vllm.model_executor.model_loader"].register_model_loader = register_model_loader
        mods["vllm.model_executor.model_loader.base_loader"].BaseModelLoader = BaseModelLoader
        mods["vllm.config"].get_current_vllm_config = lambda: types.SimpleNamespace(
            parallel_config=par)
        mods["vllm.distributed"].get_tensor_model_parallel_rank = lambda: 1
        mods["vllm.distributed"].get_tensor_model_parallel_world_size = lambda: 2
        for name, mod in mods.items():
            self.saved[name] = sys.modules.get(name)
            sys.modules[name] = mod
        import hoist.vllm
        hoist.vllm.HoistModelLoader = None
        self.vllm = hoist.vllm

    def tearDown(self):
        import sys
        for name, mod in self.saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
        self.vllm.HoistModelLoader = None

    def test_registers_and_fills_the_workers_state_dict(self):
        import types
        cls = self.vllm.register()
        self.assertIs(self.registry["hoist"], cls)
        self.assertEqual(cls.__name__, "HoistModelLoader")
        model = Fixture.models["qwen3-moe-tiny"]
        loader = cls(types.SimpleNamespace(model_loader_extra_config={"device": "host",
                                                                      "threads": 2}))
        loader.download_model(types.SimpleNamespace(model=model))
        mod = module_like({k: list(v.shape) for k, v in Fixture.moe.items()}, torch.float32)
        loader.load_weights(mod, types.SimpleNamespace(model=model))  # tp rank 1 of 2
        self.assertEqual((loader.report.rank, loader.report.world), (1, 2))
        for name, want in Fixture.moe.items():
            self.assertTrue(torch.equal(mod.state_dict()[name], want.float()), name)

    def test_rank_mapping_and_bad_config(self):
        opts = self.vllm.load_options({}, "M", tp_rank=1, tp_size=2, dp_rank=1, dp_size=2,
                                      expert_parallel=True)
        self.assertEqual((opts["rank"], opts["tp"], opts["ep"]), (3, 2, 4))
        self.assertEqual(self.vllm.check_extra('{"threads": 4}'), {"threads": 4})
        opts = self.vllm.load_options({"socket_dir": "/run/h"}, "M", 1, 2, 1, 2)
        self.assertEqual(opts["attach"], "/run/h/rank-3.sock")
        with self.assertRaises(ValueError):
            self.vllm.load_options({}, "M", 0, 2, pp_size=2)
        cls = self.vllm.register()
        import types
        with self.assertRaises(ValueError) as e:
            cls(types.SimpleNamespace(model_loader_extra_config={"topolgy": "t.yaml"}))
        self.assertIn("topolgy", str(e.exception))
        with self.assertRaises(ValueError) as e:
            cls(types.SimpleNamespace(model_loader_extra_config=None)).download_model(
                types.SimpleNamespace(model="org/not-cached"))
        self.assertIn("never downloads", str(e.exception))


if __name__ == "__main__":
    unittest.main()
