#!/usr/bin/env python3
"""Runs every command block of README.md and docs/*.md marked runnable, exactly as written.

Marker: a fenced block whose info string is `sh runnable`:

    ```sh runnable
    hoist plan --model qwen3-tiny --tp 2
    ```

GitHub shows it as an ordinary shell block. Each block runs as one `bash -e -o pipefail` script
(so `&`, `$!` and loops work as they do when pasted), in document order. A one-line command whose
comment starts with `# exit N` must end with exit status N (the documented failures, e.g.
`hoist lod   # exit 2: unknown command 'lod' (did you mean 'load'?)`); any other command must
succeed. How the docs' paths and environment map here:

  - the working directory is a fresh scratch directory per document, shared by its blocks (a
    block may use what an earlier one made, e.g. the checkpoint of the first block); it holds
    links `configs`, `tools` and `examples` to the source tree and `build` to the build tree, so
    `examples/topologies/tp8-one-node.yaml` and `cmake --install build` mean what they mean in a clone;
  - HOME is that scratch directory (`~/...` lands there);
  - PATH starts with the folders of the built `hoist` and `hoist-mkckpt`, then the folder of the
    Python the module was built for (Debian's /usr/bin/python3), then the caller's PATH;
  - tools/env.sh is sourced first, as the README's note for root and small machines says (CI
    runs as root on 2 cores);
  - there is no GPU in CI: `--device auto` takes host memory.

Also checked: every relative link in those documents points at a file of the source tree.
Usage: run_docs.py SOURCE_DIR BUILD_DIR HOIST MKCKPT PYTHON [--block-timeout S]
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(.*)$")
EXPECT_EXIT = re.compile(r"^(?P<cmd>[^#].*?)\s+# exit (?P<code>\d+)\b.*$")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def runnable_blocks(path):
    """[(line, text)] of the fenced blocks whose info string is `sh runnable`."""
    blocks, current, start = [], None, 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = FENCE.match(line.rstrip("\n"))
            if m and current is None:
                words = m.group(1).split()
                current = [] if words[:1] in (["sh"], ["bash"]) and "runnable" in words else False
                start = number + 1
            elif m and m.group(1).strip() == "":
                if current:
                    blocks.append((start, "".join(current)))
                current = None
            elif current is not None and current is not False:
                current.append(line)
    return blocks


def with_expected_exits(text):
    """The block with each `CMD  # exit N` line run as written and its status checked."""
    out, continued = [], False
    for line in text.splitlines():
        m = None if continued else EXPECT_EXIT.match(line)
        if m:
            code = m.group("code")
            out.append(f"if {{ {m.group('cmd')}\n}}; then __rc=0; else __rc=$?; fi; "
                       f"if [ \"$__rc\" != {code} ]; then "
                       f"echo \"run_docs: expected exit {code}, got $__rc\" >&2; exit 1; fi")
        else:
            out.append(line)
        continued = line.rstrip().endswith("\\")
    return "\n".join(out) + "\n"


def broken_links(path, source):
    bad = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
        if not resolved.startswith(source + os.sep) or not os.path.exists(resolved):
            bad.append(target)
    return bad


def run_block(script, cwd, env, timeout):
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything the block left running in the background
    except ProcessLookupError:
        pass
    return code, out.decode("utf-8", "replace")


def make_workspace(source, build):
    work = tempfile.mkdtemp(prefix="hoist-docs-")
    for name in ("tools", "examples"):
        os.symlink(os.path.join(source, name), os.path.join(work, name))
    os.symlink(build, os.path.join(work, "build"))
    return work


def main():
    ap = argparse.ArgumentParser()
    for name in ("source", "build", "hoist", "mkckpt", "python"):
        ap.add_argument(name)
    ap.add_argument("--block-timeout", type=float, default=600)
    a = ap.parse_args()
    source = os.path.realpath(a.source)
    docs = [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs", "*.md")))
    failures, ran = [], 0
    for doc in docs:
        rel = os.path.relpath(doc, source)
        failures += [f"{rel}: broken link {t}" for t in broken_links(doc, source)]
        blocks = runnable_blocks(doc)
        if not blocks:
            continue
        work = make_workspace(source, os.path.realpath(a.build))
        env = dict(os.environ)
        env["HOME"] = work
        env["PATH"] = os.pathsep.join([os.path.dirname(os.path.realpath(a.hoist)),
                                       os.path.dirname(os.path.realpath(a.mkckpt)),
                                       os.path.dirname(a.python), env.get("PATH", "")])
        env.pop("VIRTUAL_ENV", None)
        for line, text in blocks:
            script = f"source {source}/tools/env.sh\n{with_expected_exits(text)}"
            print(f"== {rel}:{line}\n{text}", flush=True)
            code, out = run_block(script, work, env, a.block_timeout)
            ran += 1
            print(out, flush=True)
            if code != 0:
                why = "timed out" if code is None else f"exit {code}"
                failures.append(f"{rel}:{line}: the block {why}")
                break  # later blocks of this document depend on this one
        shutil.rmtree(work, ignore_errors=True)
    if ran == 0:
        failures.append("no runnable block found in README.md or docs/*.md")
    for f in failures:
        print("FAIL: " + f)
    print(f"{ran} runnable block(s) run, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
