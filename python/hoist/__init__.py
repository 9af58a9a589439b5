"""hoist: safetensors weights into device memory, in-process or from a resident `hoist serve`
rank, as zero-copy tensors (DLPack).

    import hoist
    m = hoist.load("/models/qwen3-4b", tp=2, rank=0)    # a Model
    w = m.tensors()                                     # dict name -> tensor
    m = hoist.load("Qwen/Qwen3-4B@main", comm="world")  # a hub id, over MPI_COMM_WORLD
    m = hoist.attach("/run/hoist/rank-0.sock")          # zero copy
    m = hoist.load_async("/models/qwen3-4b")            # addresses now, bytes behind; m.wait()

    import hoist.torch                                  # fill an nn.Module in place
    hoist.torch.load_into(module, model="/models/qwen3-4b", tp=2, rank=0)

The extension is hoist._hoist (python/hoist_py.cc); this package re-exports it. hoist.torch needs
PyTorch and hoist.vllm needs vLLM; neither is imported here."""
import atexit as _atexit
import os as _os
import sys as _sys

# The module returns numpy arrays (and torch tensors through DLPack): an interpreter without numpy
# is not the one it was built for (Debian's /usr/bin/python3 unless -DHOIST_PYTHON said
# otherwise). Say so at import, not after a load.
try:
    import numpy as _np  # noqa: F401
except ImportError as _e:
    raise ImportError(
        f"hoist: {_sys.executable} has no numpy, so it is not the interpreter hoist's module was "
        "built for (Debian's /usr/bin/python3 unless cmake was given -DHOIST_PYTHON): make the "
        "virtual environment from that one, e.g. /usr/bin/python3 -m venv --system-site-packages "
        "ENV") from _e

# Open MPI loads its components with dlopen and they look for libmpi's symbols in the global
# scope: load the extension (and through it libmpi) with RTLD_GLOBAL, as mpi4py does.
_flags = _sys.getdlopenflags()
_sys.setdlopenflags(_flags | _os.RTLD_GLOBAL)
try:
    from hoist._hoist import (Model, Tensor, attach, load, load_async,  # noqa: F401
                              mpi_finalize, mpi_init, mpi_world, resolve_model)
finally:
    _sys.setdlopenflags(_flags)

# MPI initialised by hoist (load(comm="world") or mpi_init()) is finalised at exit; a no-op
# otherwise.
_atexit.register(mpi_finalize)

__all__ = ["Model", "Tensor", "attach", "load", "load_async", "mpi_finalize", "mpi_init",
           "mpi_world", "resolve_model"]
