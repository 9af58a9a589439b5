"""CI test of the example tensor-parallel engine (run.py over models.py's families) on the host
backend: its logits equal the independent float64 reference's (reference.py, from the unfused
HF tensors) to 1e-4 of their scale and its greedy tokens are identical, for hoist-mkckpt Qwen3 and
Qwen3-MoE checkpoints at tp 1, 2 and 4 (kv heads replicated at tp 4 over 2 kv heads), under ep 2
and ep 4 for the MoE, for Qwen3-MoE configs as transformers 5 writes them (num_local_experts)
with decoder_sparse_step 2 and mlp_only_layers [1] (experts exactly where vLLM puts them),
for Mixtral, GPT-OSS (BF16 experts, hoist's hf layout) and DeepSeek-V2 (MLA) checkpoints with
transformers' exact tensor names (tests/data/hf) at tp 1, 2 and ep 2, under mpirun (hoist plans
once over MPI_COMM_WORLD) and torchrun (each rank loads its part alone), from a Hugging Face repo
id in a fake hub cache, attached to `hoist serve` without a copy, and with --overlap (warm-up on
pending tensors) equal bit for bit to the synchronous run.

Needs HOIST_BIN, HOIST_MKCKPT (ctest sets them), PYTHONPATH at the hoist package, PyTorch with
gloo, mpirun. Every child process runs under a timeout."""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference import Reference  # noqa: E402  (shares no code with the engine)

RUN = os.path.join(HERE, "run.py")
HF_DATA = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "data", "hf")
# Families with transformers' exact tensor names (tests/data/hf/<arch>: config.json, tensors.json)
HF_FAMILIES = {"mixtral": 20, "gpt_oss": 17, "deepseek_v2": 18}  # name -> content seed
PROMPT = [3, 17, 92, 250, 511, 7, 800, 42]
STEPS = 6
REL_TOL = 1e-4
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_btl": "self,vader",
           "OMPI_MCA_plm_rsh_agent": "", "OMP_NUM_THREADS": "1"}

# Qwen3 with 2 kv heads for 8 query heads, untied: tp 4 replicates each kv head on 2 ranks.
KV2_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 16,
    "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "model_type": "qwen3",
    "num_attention_heads": 8, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 1000}


# Qwen3-MoE configs as transformers 5 saves them: num_experts spelled num_local_experts
# (Qwen3MoeConfig.attribute_map), rope_theta inside rope_parameters. Which layers are MoE, by
# vLLM's and transformers' rule (experts when the layer is not in mlp_only_layers and
# (layer + 1) % decoder_sparse_step == 0), worked out by hand: E moe, d dense.
MOE_T5 = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "head_dim": 16,
    "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "model_type": "qwen3_moe",
    "moe_intermediate_size": 32, "norm_topk_prob": True, "num_attention_heads": 8,
    "num_experts_per_tok": 2, "num_key_value_heads": 4, "num_local_experts": 8,
    "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "tie_word_embeddings": False, "dtype": "bfloat16", "vocab_size": 1000}
MOE_STEP2 = dict(MOE_T5, num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[])
MOE_MLP_ONLY = dict(MOE_T5, num_hidden_layers=3, decoder_sparse_step=1, mlp_only_layers=[1])
MOE_LAYERS = {"moe": "EdE", "moe-step2": "dEdE", "moe-mlp-only": "EdE"}


def checkpoint_layers(folder, layers):
    """Per layer 'E' when the checkpoint holds a router and experts there, 'd' when it holds a
    dense MLP (read from the safetensors headers alone)."""
    import struct
    names = set()
    for f in os.listdir(folder):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                names |= set(json.loads(fh.read(n)))
    out = ""
    for i in range(layers):
        moe = f"model.layers.{i}.mlp.gate.weight" in names
        dense = f"model.layers.{i}.mlp.gate_proj.weight" in names
        out += "E" if moe and not dense else "d" if dense and not moe else "?"
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mkckpt(out, seed, preset=None, config=None, tensors=None):
    cmd = [os.environ["HOIST_MKCKPT"], "--out", out, "--seed", str(seed), "--threads", "2",
           "--shard-size", "300000"]
    cmd += ["--preset", preset] if preset else ["--config", config]
    cmd += ["--tensors", tensors] if tensors else []
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=120)


def make_hub_cache(cache, repo_id, src, commit):
    """<cache>/models--org--name as huggingface_hub writes it: blobs named by content hash,
    snapshots/<commit>/<file> relative symlinks to them, refs/main holding the commit."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(os.path.join(repo, "refs"))
    snap = os.path.join(repo, "snapshots", commit)
    os.makedirs(snap)
    for f in sorted(os.listdir(src)):
        with open(os.path.join(src, f), "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        shutil.copyfile(os.path.join(src, f), os.path.join(repo, "blobs", digest))
        os.symlink(os.path.join("..", "..", "blobs", digest), os.path.join(snap, f))
    with open(os.path.join(repo, "refs", "main"), "w") as fh:
        fh.write(commit)
    return snap


class Fixture:
    tmp = None
    models = {}
    refs = {}


def setUpModule():
    Fixture.tmp = tempfile.TemporaryDirectory(prefix="hoist-tp-engine-")
    root = Fixture.tmp.name
    configs = {}
    for name, config in (("kv2", KV2_CONFIG), ("moe-step2", MOE_STEP2),
                         ("moe-mlp-only", MOE_MLP_ONLY)):
        configs[name] = os.path.join(root, name + ".json")
        with open(configs[name], "w") as fh:
            json.dump(config, fh)
    for name, seed, preset, config in (("dense", 11, "qwen3-tiny", None),
                                       ("dense-kv2", 12, None, configs["kv2"]),
                                       ("moe", 13, "qwen3-moe-tiny", None),
                                       ("moe-step2", 14, None, configs["moe-step2"]),
                                       ("moe-mlp-only", 15, None, configs["moe-mlp-only"])):
        path = os.path.join(root, name)
        mkckpt(path, seed, preset, config)
        Fixture.models[name] = path
    for name, seed in HF_FAMILIES.items():
        path = os.path.join(root, name)
        mkckpt(path, seed, config=os.path.join(HF_DATA, name, "config.json"),
               tensors=os.path.join(HF_DATA, name, "tensors.json"))
        Fixture.models[name] = path
    for name, path in Fixture.models.items():
        t0 = time.time()
        Fixture.refs[name] = Reference(path).greedy(PROMPT, STEPS)
        print(f"reference {name}: tokens {Fixture.refs[name][0]} ({time.time() - t0:.1f}s)",
              flush=True)


def tearDownModule():
    Fixture.tmp.cleanup()


class TpEngineTest(unittest.TestCase):
    def run_engine(self, model, nproc, *args, launcher="mpirun", env=None, expect=0, timeout=300):
        """Runs the engine; returns (npz of rank 0's outputs or None, combined output)."""
        out = os.path.join(Fixture.tmp.name, f"out-{time.time_ns()}.npz")
        engine = [RUN, "--model", model, "--prompt", ",".join(map(str, PROMPT)), "--tokens",
                  str(STEPS), "--threads", "2", "--out", out, *args]
        port = free_port()
        if launcher == "mpirun":
            cmd = ["mpirun", "--oversubscribe", "-np", str(nproc), sys.executable, *engine]
        elif launcher == "torchrun":
            # --redirects 1 --tee 1: torch 1.13's torchrun cannot parse its default "0" on
            # Python 3.11 (enum.IntFlag iteration skips 0); teeing stdout works everywhere.
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                   "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
                   "--master_port", str(port), "--redirects", "1", "--tee", "1",
                   "--log_dir", os.path.join(Fixture.tmp.name, "torchrun-logs"), *engine]
        else:
            cmd = [sys.executable, *engine]
        full_env = dict(os.environ, **MPI_ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        full_env.update(env or {})
        t0 = time.time()
        p = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, text=True)
        print(f"  {' '.join(cmd[cmd.index(RUN) + 1:])} [{launcher} -np {nproc}]: "
              f"exit {p.returncode} in {time.time() - t0:.1f}s", flush=True)
        if expect == 0:
            self.assertEqual(p.returncode, 0, p.stdout)
            return dict(np.load(out)), p.stdout
        self.assertEqual(p.returncode, expect, p.stdout)
        return None, p.stdout

    def assert_matches_reference(self, got, name):
        tokens, prefill, steps = Fixture.refs[name]
        self.assertEqual(got["tokens"].tolist(), tokens)
        for key, want in (("prefill", prefill.numpy()), ("steps", steps.numpy())):
            self.assertEqual(got[key].shape, want.shape, key)
            err = float(np.abs(got[key] - want).max())
            scale = float(np.abs(want).max())
            self.assertLessEqual(err, REL_TOL * scale, f"{name} {key}: max error {err:.3g} "
                                 f"against logits up to {scale:.3g}")

    def test_reference_is_not_degenerate(self):
        for name, (tokens, prefill, steps) in Fixture.refs.items():
            self.assertGreater(len(set(tokens)), 1, f"{name}: every token is {tokens[0]}")
            self.assertGreater(len(set(prefill.argmax(dim=-1).tolist())), 2, name)
            self.assertGreater(float(prefill.std()), 0.1, name)
            top2 = steps.topk(2, dim=-1).values
            margin = float((top2[:, 0] - top2[:, 1]).min() / steps.abs().max())
            self.assertGreater(margin, 10 * REL_TOL, f"{name}: a near tie makes argmax fragile")

    def test_dense_tp_1_2_4(self):
        got, _ = self.run_engine(Fixture.models["dense"], 1, "--tp", "1", launcher="single")
        self.assert_matches_reference(got, "dense")
        for tp in (2, 4):
            got, out = self.run_engine(Fixture.models["dense"], tp, "--tp", str(tp))
            self.assert_matches_reference(got, "dense")
            self.assertIn(f"loaded rank 1/{tp}", out)

    def test_overlap_warms_up_on_pending_weights(self):
        """--overlap (bf16, so that the parameters can be bound to hoist's pending tensors): the
        warm-up runs before the last byte, then the same tokens and logits, bit for bit, as the
        synchronous bf16 run, at tp 1 and 2; every start-up line item is printed (the example's
        phases, and the warm-up's host seconds by call)."""
        for tp, launcher in ((1, "single"), (2, "mpirun")):
            args = ("--tp", str(tp), "--dtype", "bfloat16")
            want, _ = self.run_engine(Fixture.models["dense"], tp, *args, launcher=launcher)
            got, out = self.run_engine(Fixture.models["dense"], tp, *args, "--overlap",
                                       launcher=launcher)
            self.assertEqual(got["tokens"].tolist(), want["tokens"].tolist())
            self.assertGreater(len(set(got["tokens"].tolist())), 1, "degenerate tokens")
            for key in ("prefill", "steps"):
                np.testing.assert_array_equal(got[key], want[key], key)
            self.assertIn("parameters bound to pending tensors", out)
            self.assertIn("warm-up host seconds: alloc", out)
            for phase in ("process_start", "hoist_plan_arena", "weights", "warm_up",
                          "first_token", "total"):
                self.assertRegex(out, rf"phase {phase} \d+\.\d+", phase)

    def test_dense_replicated_kv_heads(self):
        for tp in (1, 4):  # 2 kv heads: at tp 4 each rank holds one, shared by two ranks
            got, _ = self.run_engine(Fixture.models["dense-kv2"], tp, "--tp", str(tp))
            self.assert_matches_reference(got, "dense-kv2")

    def test_moe_tp_1_2_4(self):
        for tp in (1, 2, 4):
            got, _ = self.run_engine(Fixture.models["moe"], tp, "--tp", str(tp))
            self.assert_matches_reference(got, "moe")

    def test_moe_expert_parallel(self):
        for ep, tp, placement in ((2, 1, "linear"), (2, 2, "linear"), (4, 2, "round_robin")):
            got, out = self.run_engine(Fixture.models["moe"], ep, "--ep", str(ep), "--tp", str(tp),
                                       "--placement", placement)
            self.assert_matches_reference(got, "moe")
            self.assertIn(f"ep {ep}", out)

    def test_moe_layer_rule_unit(self):
        """qwen3_tp.Config against hand-worked layouts, and its config errors."""
        from qwen3_tp import Config
        for cfg, want in ((MOE_STEP2, "dEdE"), (MOE_MLP_ONLY, "EdE"),
                          (dict(MOE_STEP2, mlp_only_layers=[3]), "dEdd"),
                          (dict(MOE_STEP2, decoder_sparse_step=3, num_hidden_layers=6), "ddEddE"),
                          (dict(MOE_STEP2, decoder_sparse_step=None), "EEEE"),
                          (dict(MOE_STEP2, num_local_experts=0), "dddd")):
            c = Config(cfg)
            self.assertEqual("".join("E" if c.sparse(i) else "d" for i in range(c.layers)), want,
                             cfg)
            self.assertIn(f"layers {want} ", c.layer_map())
        hub = dict(MOE_MLP_ONLY, num_experts=8)  # both spellings, agreeing: fine
        self.assertEqual(Config(hub).experts, 8)
        for bad, needle in (
                (dict(MOE_MLP_ONLY, num_experts=4), "num_experts 4 disagrees with "
                                                    "num_local_experts 8"),
                ({k: v for k, v in MOE_MLP_ONLY.items() if k != "num_local_experts"},
                 "without 'num_experts'"),
                (dict(MOE_STEP2, decoder_sparse_step=0), "decoder_sparse_step 0"),
                (dict(MOE_STEP2, mlp_only_layers=1), "mlp_only_layers 1"),
                (dict(MOE_STEP2, num_experts_per_tok=None), "'num_experts_per_tok'"),
                (dict(MOE_STEP2, num_experts_per_tok=9), "exceeds 8 experts")):
            with self.assertRaises(ValueError) as e:
                Config(bad)
            self.assertIn(needle, str(e.exception))

    def test_moe_sparse_step_and_mlp_only_layers(self):
        """transformers-5 configs (num_local_experts) with decoder_sparse_step 2 and
        mlp_only_layers [1]: the checkpoint, the engine and hoist's plan put experts exactly
        where vLLM and transformers do, and the logits match the reference."""
        for name in ("moe", "moe-step2", "moe-mlp-only"):
            want = MOE_LAYERS[name]
            self.assertEqual(checkpoint_layers(Fixture.models[name], len(want)), want, name)
            cases = [(1, ["--tp", "1"], "single"), (2, ["--tp", "2"], "mpirun")]
            if name != "moe":  # covered by test_moe_expert_parallel
                cases.append((2, ["--ep", "2", "--tp", "1"], "mpirun"))
            for nproc, par, launcher in cases:
                got, out = self.run_engine(Fixture.models[name], nproc, *par, launcher=launcher)
                self.assert_matches_reference(got, name)
                self.assertIn(f"layers {want} (E moe, d dense): num_experts 8", out)

    def test_mixtral_gpt_oss_deepseek_v2(self):
        """Each family at tp 1, tp 2 and ep 2 against the reference; GPT-OSS binds to hoist's hf
        layout (its BF16 experts: a contiguous share of the interleaved gate/up dim, the down
        bias on tp rank 0 alone), the others to the fused one."""
        layouts = {"mixtral": "fused", "gpt_oss": "hf", "deepseek_v2": "fused"}
        for name, layout in layouts.items():
            for nproc, par, launcher in ((1, ["--tp", "1"], "single"),
                                         (2, ["--tp", "2"], "mpirun"),
                                         (2, ["--ep", "2", "--tp", "1"], "mpirun")):
                got, out = self.run_engine(Fixture.models[name], nproc, *par, launcher=launcher)
                self.assert_matches_reference(got, name)
                self.assertIn(f"hoist layout {layout}", out)

    def test_family_registry_unit(self):
        """models.family: the architecture picks the family (model_type when none matches);
        configs the example cannot run are refused by name."""
        import models

        def config(name, **changes):
            with open(os.path.join(HF_DATA, name, "config.json")) as fh:
                return dict(json.load(fh), **changes)

        for name, cls in (("mixtral", "MixtralForCausalLM"), ("gpt_oss", "GptOssForCausalLM"),
                          ("deepseek_v2", "DeepseekV2ForCausalLM")):
            cfg, model_class = models.family(config(name))
            self.assertEqual(model_class.__name__, cls)
            _, by_type = models.family(config(name, architectures=["Unknown"]))
            self.assertEqual(by_type.__name__, cls)
        # no layer_types: transformers' default, sliding window on the even layers
        cfg, _ = models.family(config("gpt_oss", layer_types=None, num_hidden_layers=4))
        window = cfg.sliding_window
        self.assertEqual([cfg.window(i) for i in range(4)], [window, None, window, None])
        cfg, _ = models.family(config("deepseek_v2"))
        self.assertEqual("".join("E" if cfg.sparse(i) else "d" for i in range(cfg.layers)), "dEE")
        for bad, needle in (
                (dict(architectures=["LlamaForCausalLM"], model_type="llama"),
                 "none of this example's families"),
                (config("gpt_oss", quantization_config={"quant_method": "mxfp4"}), "MXFP4"),
                (config("deepseek_v2", q_lora_rank=48), "q_lora_rank 48"),
                (config("deepseek_v2", topk_method="noaux_tc"), "topk_method 'noaux_tc'"),
                (config("mixtral", rope_parameters={"rope_theta": 1e6, "rope_type": "yarn"}),
                 "rope scaling 'yarn'")):
            with self.assertRaises(ValueError) as e:
                models.family(bad)
            self.assertIn(needle, str(e.exception))

    def test_moe_layer_mismatch_is_a_named_error(self):
        """A config.json that puts experts where the checkpoint has none fails the plan with
        the tensor and the rule named (a checkpoint error: exit 1), never a half-loaded model."""
        folder = os.path.join(Fixture.tmp.name, "moe-step2-as-step1")
        shutil.copytree(Fixture.models["moe-step2"], folder)
        with open(os.path.join(folder, "config.json"), "w") as fh:
            json.dump(dict(MOE_STEP2, decoder_sparse_step=1), fh)
        _, out = self.run_engine(folder, 1, "--tp", "1", launcher="single", expect=1)
        self.assertIn("model.layers.0.mlp.", out)
        self.assertIn("a dense-MLP tensor, but config.json makes layer 0 a sparse MoE layer", out)
        self.assertIn("decoder_sparse_step 1", out)

    def test_torchrun_each_rank_loads_alone(self):
        got, out = self.run_engine(Fixture.models["moe"], 2, "--tp", "2", launcher="torchrun")
        self.assert_matches_reference(got, "moe")
        self.assertIn("(torchrun)", out)

    def test_hub_repo_id_in_a_fake_cache(self):
        cache = os.path.join(Fixture.tmp.name, "hub")
        commit = "a" * 40
        make_hub_cache(cache, "tiny-org/Qwen3-Tiny", Fixture.models["dense-kv2"], commit)
        env = {"HF_HUB_CACHE": cache, "HF_HOME": os.path.join(Fixture.tmp.name, "nohome")}
        got, out = self.run_engine("tiny-org/Qwen3-Tiny@main", 2, "--tp", "2", env=env)
        self.assert_matches_reference(got, "dense-kv2")
        self.assertIn(os.path.join("snapshots", commit), out)
        _, out = self.run_engine("tiny-org/Absent", 2, "--tp", "2", env=env, expect=2)
        self.assertIn("never downloads", out)
        self.assertIn(os.path.join(cache, "models--tiny-org--Absent") + " (not there)", out)
        self.assertIn(os.path.join(Fixture.tmp.name, "nohome", "hub", "models--tiny-org--Absent"),
                      out)

    def test_usage_errors_exit_2(self):
        _, out = self.run_engine(Fixture.models["dense"], 1, "--tp", "3", launcher="single",
                                 expect=2)
        self.assertIn("world 1 is not a multiple of tp 3", out)
        _, out = self.run_engine(Fixture.models["dense-kv2"], 2, "--tp", "2", "--prompt",
                                 "1,5000", expect=2)
        self.assertIn("--prompt ids must lie in [0, 1000)", out)

    def test_attached_to_hoist_serve_without_a_copy(self):
        model, sock = Fixture.models["dense"], os.path.join(Fixture.tmp.name, "sock")
        daemons = []
        try:
            for r in (0, 1):
                daemons.append(subprocess.Popen(
                    [os.environ["HOIST_BIN"], "serve", "--model", model, "--tp", "2", "--rank",
                     str(r), "--device", "host", "--socket-dir", sock, "--log-level", "warn"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            deadline = time.time() + 120
            while time.time() < deadline and not all(
                    os.path.exists(os.path.join(sock, f"rank-{r}.sock")) for r in (0, 1)):
                time.sleep(0.1)
            # bf16 parameters: hoist's dtype, so every one is the daemon's memory (share=yes
            # makes anything else an error); the same run embedded gives the same bits.
            attached, out = self.run_engine(model, 2, "--tp", "2", "--dtype", "bfloat16",
                                            "--attach", sock, "--share", "yes")
            self.assertIn("shared (zero copy), 0 copied", out)
            embedded, _ = self.run_engine(model, 2, "--tp", "2", "--dtype", "bfloat16")
            for key in ("tokens", "prefill", "steps"):
                self.assertTrue(np.array_equal(attached[key], embedded[key]), key)
            # bf16 arithmetic is still close to the float64 reference (a loose, bf16 bound).
            ref_prefill = Fixture.refs["dense"][1].numpy()
            err = float(np.abs(attached["prefill"] - ref_prefill).max())
            self.assertLess(err, 0.1 * float(np.abs(ref_prefill).max()))
        finally:
            for d in daemons:
                d.send_signal(signal.SIGTERM)
            for d in daemons:
                self.assertEqual(d.wait(timeout=30), 0)


if __name__ == "__main__":
    unittest.main()
