"""`pip install .` into a fresh virtual environment gives a working
`import flywheel` and `flywheel` command (pyproject.toml, scikit-build-core).

The build dependencies (scikit-build-core, pybind11, numpy) come from the
project's locked environment through a .pth file, and pip runs without build
isolation, so the build reuses the objects of the main build through ccache
(build-wheel/ sits beside build/; the Makefile sets CCACHE_BASEDIR): the
test costs a configure and two links, not a rebuild. `make pip-install-check`
runs the same install with normal build isolation (build dependencies from
PyPI), as a user's `pip install .` does.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_PYTHON = "/usr/bin/python3"


def _clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLYWHEEL_BIN", "FLYWHEEL_PYTHON",
                                                             "FLYWHEEL_PYTHONPATH", "VIRTUAL_ENV")}
    env["CCACHE_BASEDIR"] = REPO
    env["CCACHE_NOHASHDIR"] = "1"
    # The compilers build/ was configured with (scikit-build-core would take
    # Python's x86_64-linux-gnu-gcc: the same compiler under another name,
    # which ccache and CMake treat as a different one).
    env.setdefault("CC", "cc")
    env.setdefault("CXX", "c++")
    return env


@pytest.mark.skipif(not os.path.exists(BASE_PYTHON), reason="needs Debian's python3 (python3-venv)")
def test_pip_install_into_a_fresh_venv_gives_import_and_cli(tmp_path):
    venv = tmp_path / "venv"
    env = _clean_env()
    subprocess.run([BASE_PYTHON, "-m", "venv", str(venv)], check=True, env=env)
    py = str(venv / "bin" / "python")
    # The locked environment's site-packages (scikit-build-core, pybind11, numpy).
    site = sysconfig.get_paths()["purelib"]
    fresh_site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(fresh_site, "flywheel_build_deps.pth"), "w") as f:
        f.write(site + "\n")
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--disable-pip-version-check", "-q",
                        "--config-settings", f"build-dir={REPO}/build-wheel", REPO],
                       env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    script = textwrap.dedent("""
        import os, sys, numpy as np, flywheel
        assert flywheel.__file__.startswith(sys.prefix), flywheel.__file__
        t = flywheel.Table.create(sys.argv[1], {"x": "int64", "s": "string?"})
        t.append({"x": np.arange(5), "s": ["a", None, "c", "d", "e"]})
        t = flywheel.Table.open(sys.argv[1])
        b = t.take([4, 1])
        assert b["x"].tolist() == [4, 1] and b["s"] == ["e", None], b
        print("ok", t.version, t.num_rows)
    """)
    table = str(tmp_path / "t")
    out = subprocess.run([py, "-c", script, table], env=env, capture_output=True, text=True, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "2", "5"]
    cli = str(venv / "bin" / "flywheel")
    assert os.access(cli, os.X_OK)
    h = subprocess.run([cli, "--help"], env=env, capture_output=True, text=True)
    assert h.returncode == 0 and "table" in h.stdout
    head = subprocess.run([cli, "table", "head", table], env=env, capture_output=True, text=True)
    assert head.returncode == 0 and "(5 of 5 rows, version 2)" in head.stdout, head.stdout + head.stderr
    shutil.rmtree(venv, ignore_errors=True)
