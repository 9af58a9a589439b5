"""The `hoist` Python module on the host backend (numpy): the Models hoist.load and hoist.attach
return give (Model.tensors()) numpy arrays that equal an independent reference computed here from
the safetensors files (vLLM's tensor-parallel slicing, hf layout), and attach maps the daemon's
bytes without a copy.

Needs HOIST_BIN and HOIST_MKCKPT (ctest sets them) and PYTHONPATH pointing at the module."""
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import unittest

import numpy as np

import hoist

HOIST_BIN = os.environ["HOIST_BIN"]
MKCKPT = os.environ["HOIST_MKCKPT"]


def read_safetensors(folder):
    """name -> numpy array of raw element bits (uint16 for BF16, float32 for F32)."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, f), "rb") as fh:
            data = fh.read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        base = 8 + n
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            start, end = meta["data_offsets"]
            dt = {"BF16": np.uint16, "F32": np.float32}[meta["dtype"]]
            out[name] = np.frombuffer(data[base + start:base + end], dtype=dt).reshape(meta["shape"])
    return out


def reference_rank(full, tp, rank):
    """What rank `rank` of tp holds for the tensors this test checks (hf layout)."""
    ref = {}
    for name, w in full.items():
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                          "up_proj.weight")):
            n = w.shape[0] // tp
            ref[name] = w[rank * n:(rank + 1) * n]          # column parallel: rows
        elif name.endswith(("o_proj.weight", "down_proj.weight")):
            k = w.shape[1] // tp
            ref[name] = w[:, rank * k:(rank + 1) * k]       # row parallel: columns
        elif name.endswith("norm.weight"):
            ref[name] = w                                   # replicated
    return ref


class HoistModuleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="hoist-py-")
        cls.model = os.path.join(cls.tmp.name, "qwen3-tiny")
        subprocess.run([MKCKPT, "--preset", "qwen3-tiny", "--out", cls.model, "--seed", "31",
                        "--shard-size", "150000", "--threads", "2"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.full = read_safetensors(cls.model)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, tensors, rank):
        ref = reference_rank(self.full, 2, rank)
        self.assertGreater(len(ref), 10)
        for name, want in ref.items():
            self.assertIn(name, tensors)
            got = tensors[name]
            self.assertIsInstance(got, np.ndarray)
            self.assertEqual(got.shape, want.shape, name)
            self.assertEqual(got.dtype, want.dtype, name)  # BF16 arrives as uint16 bits
            self.assertTrue(np.array_equal(got, want), name)
            self.assertTrue(np.any(got != 0), name)

    def test_load_matches_reference(self):
        for rank in (0, 1):
            m = hoist.load(self.model, tp=2, rank=rank, device="host", layout="hf", threads=2)
            self.check(m.tensors(), rank)

    def test_model_object_and_dlpack(self):
        m = hoist.load(self.model, tp=2, rank=1, device="host", layout="hf")
        self.assertEqual((m.rank, m.world, m.device, m.attached), (1, 2, "host", False))
        w = m["model.norm.weight"]
        self.assertEqual(w.dtype, "BF16")
        self.assertEqual(w.__dlpack_device__(), (1, 0))  # kDLCPU
        arr = np.from_dlpack(w.raw())
        self.assertEqual(arr.ctypes.data, w.data_ptr)  # a view, not a copy
        m.release()  # the array keeps the weights alive
        self.assertTrue(np.array_equal(arr, self.full["model.norm.weight"]))
        with self.assertRaises(RuntimeError):
            hoist.load(os.path.join(self.tmp.name, "missing"), device="host")

    def test_bf16_reaches_numpy_as_bits(self):
        """numpy has no bfloat16: np.from_dlpack(t) fails, Tensor.numpy() and Tensor.raw() give the
        bits as uint16 without a copy, and the documented widening gives the float32 values."""
        m = hoist.load(self.model, device="host", layout="hf", threads=2)
        t = m["model.layers.1.self_attn.o_proj.weight"]
        self.assertEqual(t.dtype, "BF16")
        with self.assertRaises((RuntimeError, BufferError, TypeError)):
            np.from_dlpack(t)
        bits = self.full[t.name]
        for view in (t.numpy(), np.from_dlpack(t.raw())):
            self.assertEqual(view.dtype, np.uint16)
            self.assertEqual(view.shape, tuple(t.shape))
            self.assertEqual(view.ctypes.data, t.data_ptr)  # a view, not a copy
            self.assertTrue(np.array_equal(view, bits))
        # docs/EMBEDDING.md: BF16 bits -> float32 by a 16-bit shift; checked against struct.
        values = (t.numpy().astype(np.uint32) << 16).view(np.float32)
        for i, j in ((0, 0), (3, 17), (t.shape[0] - 1, t.shape[1] - 1)):
            want = struct.unpack("<f", struct.pack("<I", int(bits[i, j]) << 16))[0]
            self.assertEqual(values[i, j], want)
            self.assertNotEqual(want, 0.0)
        m.release()

    def test_attach_to_a_daemon(self):
        sock_dir = os.path.join(self.tmp.name, "sock")
        log = open(os.path.join(self.tmp.name, "serve.log"), "w")
        p = subprocess.Popen([HOIST_BIN, "serve", "--model", self.model, "--tp", "2", "--rank", "1",
                              "--layout", "hf", "--device", "host", "--socket-dir", sock_dir],
                             stdout=log, stderr=subprocess.STDOUT)
        try:
            path = os.path.join(sock_dir, "rank-1.sock")
            deadline = time.time() + 60
            model = None
            while time.time() < deadline:
                try:
                    model = hoist.attach(path)
                    break
                except RuntimeError:
                    time.sleep(0.05)
            if model is None:
                with open(log.name) as fh:
                    self.fail("the daemon never answered:\n" + fh.read())
            self.assertTrue(model.attached)
            tensors = model.tensors()
            self.check(tensors, 1)
            # Zero copy: the numpy array's memory is the mapping of the daemon's arena.
            w = model["model.layers.0.self_attn.o_proj.weight"]
            self.assertEqual(tensors[w.name].ctypes.data, w.data_ptr)
            self.check(hoist.attach(path).tensors(), 1)
        finally:
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(timeout=30), 0)
            log.close()
        self.assertFalse(os.path.exists(path))

    def test_hub_repo_ids_resolve_in_the_local_cache(self):
        """A fake hub cache as huggingface_hub writes it (blobs, symlinked snapshot, refs/main):
        the CLI, hoist.load and hoist.resolve_model take the repo id; an absent one fails with
        exit 2 / InvalidArgument naming every place looked."""
        cache = os.path.join(self.tmp.name, "hub")
        repo = os.path.join(cache, "models--tiny-org--Qwen3-Tiny")
        commit = "0123456789abcdef0123456789abcdef01234567"
        snap = os.path.join(repo, "snapshots", commit)
        os.makedirs(os.path.join(repo, "blobs"))
        os.makedirs(os.path.join(repo, "refs"))
        os.makedirs(snap)
        for i, f in enumerate(sorted(os.listdir(self.model))):
            shutil.copyfile(os.path.join(self.model, f), os.path.join(repo, "blobs", f"blob{i}"))
            os.symlink(os.path.join("..", "..", "blobs", f"blob{i}"), os.path.join(snap, f))
        with open(os.path.join(repo, "refs", "main"), "w") as fh:
            fh.write(commit)
        env = dict(os.environ, HF_HUB_CACHE=cache, HF_HOME=os.path.join(self.tmp.name, "hf"))
        saved = {k: os.environ.get(k) for k in ("HF_HUB_CACHE", "HF_HOME")}
        os.environ.update(HF_HUB_CACHE=cache, HF_HOME=os.path.join(self.tmp.name, "hf"))
        try:
            self.assertEqual(hoist.resolve_model("tiny-org/Qwen3-Tiny"), snap)
            self.assertEqual(hoist.resolve_model(f"tiny-org/Qwen3-Tiny@{commit}"), snap)
            self.check(hoist.load("tiny-org/Qwen3-Tiny@main", tp=2, rank=1, device="host",
                                  layout="hf").tensors(), 1)
            with self.assertRaises(RuntimeError) as e:
                hoist.load("tiny-org/Absent", device="host")
            self.assertTrue(str(e.exception).startswith("InvalidArgument"), str(e.exception))
            with self.assertRaises(ValueError) as e:
                hoist.resolve_model("tiny-org/Qwen3-Tiny@v9")
            self.assertIn(os.path.join(repo, "refs", "v9"), str(e.exception))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        ok = subprocess.run([HOIST_BIN, "plan", "--model", "tiny-org/Qwen3-Tiny", "--tp", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=60)
        self.assertEqual(ok.returncode, 0, ok.stdout)
        bad = subprocess.run([HOIST_BIN, "plan", "--model", "tiny-org/Absent@main"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60)
        self.assertEqual(bad.returncode, 2, bad.stdout)
        for where in (os.path.join(cache, "models--tiny-org--Absent") + " (not there)",
                      os.path.join(self.tmp.name, "hf", "hub", "models--tiny-org--Absent"),
                      "never downloads"):
            self.assertIn(where, bad.stdout)


if __name__ == "__main__":
    unittest.main()
