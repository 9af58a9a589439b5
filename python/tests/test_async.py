"""hoist.load_async on the host backend: tensors are pending (final addresses, the host
arena's 0xCD fill, no byte landed) while a test hook holds the streaming, and after wait() they
equal an independent reference read from the safetensors files here (tensor-parallel slicing,
hf layout) at the same addresses; cancel surfaces at wait. Under mpirun (2 ranks, this file
with --mpi-child): a collective asynchronous load matches the reference on both ranks, a rank
that fails while streaming is named at every rank's wait, and a dedup plan (which forwards bytes
between ranks) comes back complete (loaded synchronously). hoist.attach(pending_ok=True) to a
`hoist serve` daemon whose restore is held: a pending Model that equals the reference after wait().

Needs HOIST_BIN and HOIST_MKCKPT (ctest sets them) and PYTHONPATH pointing at the module; the test
hooks (HOIST_TEST_HOOKS builds)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

import hoist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hoist import read_safetensors, reference_rank  # noqa: E402

MKCKPT = os.environ["HOIST_MKCKPT"]
HOIST_BIN = os.environ["HOIST_BIN"]


def make_checkpoint(folder):
    subprocess.run([MKCKPT, "--preset", "qwen3-tiny", "--out", folder, "--seed", "41",
                    "--shard-size", "150000", "--threads", "2"], check=True,
                   stdout=subprocess.DEVNULL)


def check(test, model, full, tp, rank):
    ref = reference_rank(full, tp, rank)
    test.assertGreater(len(ref), 10)
    got = model.tensors(to="numpy")
    for name, want in ref.items():
        test.assertTrue(np.array_equal(got[name], want), name)


class AsyncLoadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="hoist-async-")
        cls.model = os.path.join(cls.tmp.name, "qwen3-tiny")
        make_checkpoint(cls.model)
        cls.full = read_safetensors(cls.model)
        cls.gate = os.path.join(cls.tmp.name, "gate")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        if os.path.exists(self.gate):
            os.remove(self.gate)
        os.environ["HOIST_TEST_HOLD_STREAMING"] = self.gate

    def tearDown(self):
        open(self.gate, "w").close()
        del os.environ["HOIST_TEST_HOLD_STREAMING"]

    def test_pending_then_reference(self):
        m = hoist.load_async(self.model, tp=2, rank=1, device="host", layout="hf")
        self.assertTrue(m.pending)
        self.assertEqual(m.layers[0], "embeddings")
        self.assertEqual(m.layers[-1], "head")
        self.assertEqual(m.layer_of("model.layers.1.mlp.down_proj.weight"), 2)
        self.assertFalse(m.layer_ready(0))
        p = m.progress()
        self.assertEqual((p["layers_ready"], p["ended"]), (0, False))
        w = m["model.layers.0.self_attn.o_proj.weight"]
        before = w.data_ptr
        held = np.from_dlpack(w.raw())  # a view of the arena: nothing landed yet
        self.assertTrue(np.all(held == 0xCDCD))
        open(self.gate, "w").close()
        m.wait()
        self.assertFalse(m.pending)
        self.assertEqual(m["model.layers.0.self_attn.o_proj.weight"].data_ptr, before)
        self.assertTrue(np.array_equal(held, reference_rank(self.full, 2, 1)[
            "model.layers.0.self_attn.o_proj.weight"]))  # the same memory, now landed
        check(self, m, self.full, 2, 1)
        m.stream_wait()  # host backend: returns once landed
        m.wait_layer(len(m.layers) - 1)
        self.assertEqual(m.progress()["layers_ready"], len(m.layers))
        m.release()

    def test_cancel_surfaces_at_wait(self):
        m = hoist.load_async(self.model, tp=2, rank=0, device="host", layout="hf")
        m.cancel()
        with self.assertRaisesRegex(RuntimeError, "rank 0.*cancelled"):
            m.wait()
        m.release()

    def test_attach_pending_during_a_restore(self):
        """hoist.attach(path, pending_ok=True) while `hoist ctl restore` is held mid-way
        (HOIST_TEST_HOLD_RESTORE): a pending Model at once, whose tensors equal the reference only
        after m.wait(); the restore's own `ctl` call ends with it."""
        sock_dir = os.path.join(self.tmp.name, "sock-pending")
        gate = os.path.join(self.tmp.name, "restore-gate")
        log = open(os.path.join(self.tmp.name, "serve-pending.log"), "w")
        env = dict(os.environ, HOIST_TEST_HOLD_RESTORE=gate)
        env.pop("HOIST_TEST_HOLD_STREAMING", None)  # the daemon's own load runs through
        p = subprocess.Popen([HOIST_BIN, "serve", "--model", self.model, "--tp", "2", "--rank", "1",
                              "--layout", "hf", "--device", "host", "--socket-dir", sock_dir,
                              "--host-cache"], stdout=log, stderr=subprocess.STDOUT, env=env)
        path = os.path.join(sock_dir, "rank-1.sock")

        def ctl(*args):
            return subprocess.run([HOIST_BIN, "ctl", *args, "--socket", path, "--json"],
                                  capture_output=True, text=True)
        try:
            deadline = time.time() + 60
            while time.time() < deadline and ctl("status").returncode != 0:
                time.sleep(0.05)
            self.assertEqual(ctl("release").returncode, 0)
            restore = subprocess.Popen([HOIST_BIN, "ctl", "restore", "--timeout-s", "120", "--socket", path],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            while time.time() < deadline:
                status = json.loads(ctl("status").stdout)["status"]
                if status["restoring"]:
                    break
                time.sleep(0.01)
            m = hoist.attach(path, pending_ok=True)
            self.assertTrue(m.pending)
            self.assertTrue(m.attached)
            before = m.tensors()
            ref = reference_rank(self.full, 2, 1)
            self.assertFalse(all(np.array_equal(before[n], w) for n, w in ref.items()))
            open(gate, "w").close()
            m.wait()
            self.assertFalse(m.pending)
            after = m.tensors()
            check(self, m, self.full, 2, 1)
            for name in ref:  # the same memory: the addresses were final before the bytes
                self.assertEqual(before[name].ctypes.data, after[name].ctypes.data)
            out, _ = restore.communicate(timeout=60)
            self.assertEqual(restore.returncode, 0, out)
            self.assertIn("restored", out)
            m.release()
        finally:
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(timeout=30), 0)
            log.close()

    def test_mpi_two_ranks(self):
        env = dict(os.environ)
        env.pop("HOIST_TEST_HOLD_STREAMING", None)
        r = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", "--allow-run-as-root",
                            sys.executable, os.path.abspath(__file__), "--mpi-child",
                            self.model], env=env, capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count("child ok"), 2, r.stdout + r.stderr)


def mpi_child(model):
    """Each rank of `mpirun -np 2`: three collective loads, checked."""
    full = read_safetensors(model)
    t = unittest.TestCase()
    m = hoist.load_async(model, tp=2, comm="world", device="host", layout="hf")
    rank = m.rank
    m.wait()
    check(t, m, full, 2, rank)
    m.release()

    os.environ["HOIST_TEST_FAIL_STREAMING_RANK"] = "1"
    m = hoist.load_async(model, tp=2, comm="world", device="host", layout="hf")
    with t.assertRaisesRegex(RuntimeError, "rank 1.*injected failure while streaming"):
        m.wait()
    m.release()
    del os.environ["HOIST_TEST_FAIL_STREAMING_RANK"]

    m = hoist.load_async(model, dp=2, dedup="node", comm="world", device="host",
                               layout="hf")
    t.assertFalse(m.pending)  # forwarding needs the MPI thread: loaded before returning
    check(t, m, full, 1, 0)
    m.release()
    print(f"rank {rank}: child ok", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--mpi-child":
        mpi_child(sys.argv[2])
    else:
        unittest.main()
