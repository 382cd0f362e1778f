"""ctest thread_safety_check: clang's -Wthread-safety analysis, as errors,
over every library translation unit that takes an absl::Mutex or carries
lock annotations (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...), with
the build's own flags (compile_commands.json), syntax only. First it checks
that the analysis catches a planted violation (thread_safety_violation.cc).

    python3 tests/compile_checks/thread_safety.py BUILD_DIR [--jobs N]
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
LOCKS = re.compile(r"absl::Mutex|ABSL_(?:GUARDED_BY|PT_GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|SHARED_LOCKS_REQUIRED|"
                   r"LOCKS_EXCLUDED|ACQUIRED_BEFORE|ACQUIRED_AFTER|LOCK_RETURNED)")
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option",
         "-Wno-unused-command-line-argument"]


def clang_command(entry):
    """The build's command for one file, run by clang++ syntax-only."""
    args = shlex.split(entry["command"])
    out, skip = ["clang++"], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-MD", "-MMD", "-c") or a.startswith("-g") or a.endswith("c++") and a.startswith("/"):
            continue
        out.append(a)
    return out + FLAGS


def annotated(path):
    stem, _ = os.path.splitext(path)
    for p in (path, stem + ".h"):
        try:
            with open(p, errors="replace") as f:
                if LOCKS.search(f.read()):
                    return True
        except OSError:
            pass
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    if not shutil.which("clang++"):
        print("thread-safety check: clang++ is not installed (make deps installs it)", file=sys.stderr)
        return 1
    db = os.path.join(a.build_dir, "compile_commands.json")
    with open(db) as f:
        entries = json.load(f)
    src = next(e for e in entries if "/src/flywheel/base/" in e["file"])
    # 1. The analysis is on: a planted violation fails.
    planted = os.path.join(HERE, "thread_safety_violation.cc")
    cmd = [planted if arg == src["file"] else arg for arg in clang_command(src)]
    r = subprocess.run(cmd, cwd=src["directory"], capture_output=True, text=True)
    if r.returncode == 0 or "requires holding mutex" not in r.stderr:
        print("thread-safety check: the planted violation was not caught:\n" + r.stderr, file=sys.stderr)
        return 1
    # 2. The library is clean.
    files = [e for e in entries if "/src/flywheel/" in e["file"] and not e["file"].endswith("_test.cc")
             and annotated(e["file"])]
    t0 = time.monotonic()

    def check(e):
        r = subprocess.run(clang_command(e), cwd=e["directory"], capture_output=True, text=True)
        return e["file"], r.returncode, r.stderr
    with ThreadPoolExecutor(a.jobs) as ex:
        results = list(ex.map(check, files))
    bad = [(f, err) for f, rc, err in results if rc != 0]
    for f, err in bad:
        print(f"== {f}\n{err}", file=sys.stderr)
    print(f"thread-safety check: {len(files)} translation units with locks, {len(bad)} failing "
          f"({time.monotonic() - t0:.0f} s); the planted violation was caught")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
