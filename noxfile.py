"""ZYFA's developer and CI tasks: every one is a nox session.

    nox -s lint      ruff check + ruff format --check (root ruff.toml)
    nox -s tests     install the four packages with torch, run every package's tests in one pytest run
    nox -s kernels   bazel build //kernels:all (skips with a message when bazel is absent)
    nox -s docs      mkdocs build --strict
    nox -s demo      attention on the best device present, checked against a float64 reference
    nox -s bench     zyfa-bench on a GPU (skips with a message without one)

Venvs are reused, and the local packages are reinstalled only when their files (or the install
request) change, so a second run of a session skips straight to its work.  Pins live here, in
docs/requirements.txt, and (toolchains) in kernels/toolchains.bzl, which is read, not copied.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import nox

if sys.version_info >= (3, 11):
    import tomllib
else:  # nox's own dependencies bring tomli on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["lint", "tests", "docs", "demo"]

# Dependency order: zyfa-core build-depends on zyfa-asmgen; zyfa-torch needs zyfa-core; zyfa-bench needs zyfa.
PACKAGES = ("zyfa-asmgen", "zyfa-core", "zyfa-torch", "zyfa-bench")
# A plain PyPI pin: on this project's machines pip takes the CPU wheel that lies on disk; elsewhere
# PyPI serves the CUDA build for Linux x86_64 (about 2.7 GB with its nvidia-* wheels).
TORCH = "torch==2.13.0"
# Pins for what the packages' own "test" extras ask for by range, plus PyYAML, which the simulator's
# YAML-subset test compares against.
TEST_DEPS = ("pytest==9.0.3", "hypothesis==6.155.2", "PyYAML==6.0.3")
# The build backend of the packages the tests session builds without isolation (zyfa-torch, zyfa-bench).
SETUPTOOLS = "setuptools==80.9.0"
# Extras the tests session installs where a package defines them (test deps, the pinned assembler,
# the gfx950 decoder's encoding tables, safetensors for captured workloads, transformers for the HF
# attention backend and `capture`).
TEST_EXTRAS = ("test", "asm", "decode", "captured", "hf", "capture")
LINT_DEPS = ("ruff==0.17.6",)
TEST_DIRS_EXTRA = ("kernels/tools/tests",)
SKIP_KERNELS_ENV = "ZYFA_SKIP_KERNELS"


def toolchain_pins() -> dict[str, dict[str, str]]:
    """Return the TOOLCHAINS literal of kernels/toolchains.bzl (the one place the pins live)."""
    tree = ast.parse((ROOT / "kernels" / "toolchains.bzl").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "TOOLCHAINS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError("kernels/toolchains.bzl defines no TOOLCHAINS literal")


def pip_pin(tool: str) -> str:
    """Return the pip requirement pinned for `tool` in kernels/toolchains.bzl, e.g. 'ziglang==0.17.0'."""
    return toolchain_pins()[tool]["pip"]


def gpu_present() -> str | None:
    """Name the GPU driver whose device nodes are present ('cuda' or 'rocm'), else None (no torch needed)."""
    if Path("/dev/nvidiactl").exists() or Path("/dev/nvidia0").exists():
        return "cuda"
    if Path("/dev/kfd").exists():
        return "rocm"
    return None


def _tree_files(paths: Iterable[Path]) -> list[Path]:
    """List the files under `paths` that git tracks or would track (build outputs are ignored)."""
    rels = [str(p.relative_to(ROOT)) for p in paths]
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "--", *rels],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return sorted(ROOT / line for line in out.splitlines() if (ROOT / line).is_file())
    except (OSError, subprocess.CalledProcessError):
        # No git (an unpacked tarball): hash everything but caches.
        skip = {"__pycache__", "build", ".pytest_cache"}
        return sorted(
            f for p in paths for f in p.rglob("*") if f.is_file() and not skip.intersection(f.parts)
        )


def _fingerprint(requirements: list[str], env: dict[str, str]) -> str:
    """Hash the install request plus the contents of the requirement files and local packages it names
    (and kernels/, which the zyfa-core build compiles): a venv is refreshed exactly when these change."""
    digest = hashlib.sha256(json.dumps([requirements, sorted(env.items())]).encode())
    paths = [ROOT / r.split("[")[0] for r in requirements]  # 'packages/zyfa-torch[test]' -> its dir
    local = [p for p in paths if p.is_dir()]
    if any(p.name == "zyfa-core" for p in local):
        # Its build compiles kernels/ with the toolchains found (nvcc appearing or going counts too) and
        # runs the gfx950 generator from zyfa-asmgen's sources.
        local += [ROOT / "kernels", ROOT / "packages" / "zyfa-asmgen"]
        digest.update(f"nvcc={shutil.which('nvcc')}".encode())
    files = [p for p in paths if p.is_file()]  # e.g. -r docs/requirements.txt
    for f in files + _tree_files(local):
        digest.update(str(f.relative_to(ROOT)).encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def install(
    session: nox.Session,
    requirements: list[str],
    env: dict[str, str] | None = None,
    step: str = "",
    show_output: bool = False,
) -> None:
    """pip-install `requirements` (pins and local package dirs) in one resolver run, unless the venv
    already holds exactly this request (same pins, same local files, same build environment).
    A session that installs in several steps names each (`step`): each keeps its own stamp.
    `show_output` prints pip's output as it comes (nox keeps an install quiet unless it fails)."""
    env = env or {}
    stamp = Path(session.virtualenv.location) / f".zyfa-install-stamp{'-' + step if step else ''}"
    fingerprint = _fingerprint(requirements, env)
    if stamp.exists() and stamp.read_text() == fingerprint:
        session.log("venv is up to date with the sources; skipping pip install")
        return
    stamp.unlink(missing_ok=True)
    # pip (>= 21.3, and the venv's is newer) rebuilds and reinstalls local directories every time.
    session.install(*requirements, env=env, silent=not show_output)
    stamp.write_text(fingerprint)


def package_dirs(extras: Iterable[str] = ()) -> list[str]:
    """pip requirements for the four local packages, each with those of `extras` it defines
    (e.g. 'packages/zyfa-torch[test]'); every package must exist (a missing one is an error)."""
    missing = [p for p in PACKAGES if not (ROOT / "packages" / p / "pyproject.toml").is_file()]
    if missing:
        raise RuntimeError(f"packages without a pyproject.toml: {', '.join(missing)}")
    reqs = []
    for name in PACKAGES:
        project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
        have = [e for e in extras if e in project.get("optional-dependencies", {})]
        reqs.append(f"packages/{name}" + (f"[{','.join(have)}]" if have else ""))
    return reqs


def install_zyfa(session: nox.Session, packages: list[str], requirements: Iterable[str] = ()) -> None:
    """Install torch, `requirements` and the local `packages` (from `package_dirs`).

    zyfa-torch builds its C++ hot path zyfa._C against the installed torch, so torch and the packages
    before it come first, and zyfa-torch (with zyfa-bench, which needs it) is built without isolation,
    as flash-attn is. zyfa-core, whose build compiles the kernels (minutes on a first run), installs in a
    step of its own with `pip -v` and its output shown: pip passes a build's output through only with
    -v, and the kernel build prints which kernel it compiles and how many are left."""
    late = [r for r in packages if r.startswith(("packages/zyfa-torch", "packages/zyfa-bench"))]
    core = [r for r in packages if r.startswith("packages/zyfa-core")]
    early = [r for r in packages if r not in late and r not in core]
    install(session, [TORCH, *requirements, SETUPTOOLS, *early])
    install(session, [TORCH, "-v", *core], env=kernel_build_env(), step="kernels", show_output=True)
    install(session, [TORCH, "--no-build-isolation", *late], step="torch-ext")


def pytest_markers() -> list[str]:
    """The pytest markers the packages declare in their pyproject.toml (tool.pytest.ini_options)."""
    markers = []
    for name in PACKAGES:
        tool = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text()).get("tool", {})
        markers += tool.get("pytest", {}).get("ini_options", {}).get("markers", [])
    return markers


def kernel_build_env() -> dict[str, str]:
    """A caller's ZYFA_SKIP_KERNELS, which the zyfa-core pip build reads (named, so it counts in the
    venv fingerprint: switching it reinstalls zyfa-core)."""
    return {k: os.environ[k] for k in (SKIP_KERNELS_ENV,) if k in os.environ}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree (root ruff.toml)."""
    install(session, list(LINT_DEPS))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Install the four packages with torch and the toolchain pins; run all their tests in one pytest.

    zyfa-core's pip build compiles every code object the present toolchains allow (a few seconds a
    kernel), so the tests see the installed manifest and a broken pip build fails here.  Extra args
    go to pytest: `nox -s tests -- -k reference -x`."""
    requirements = [*TEST_DEPS, pip_pin("ziglang")]
    # Test-only requirements a test directory keeps beside its tests (e.g. the ISA pseudocode the
    # simulator is checked against).
    for extra in sorted(ROOT.glob("packages/*/tests/**/requirements-test.txt")):
        requirements += ["-r", str(extra.relative_to(ROOT))]
    install_zyfa(session, package_dirs(TEST_EXTRAS), requirements)
    test_dirs = [f"packages/{p}/tests" for p in PACKAGES] + list(TEST_DIRS_EXTRA)
    missing = [d for d in test_dirs if not (ROOT / d).is_dir()]
    if missing:
        session.error(f"test directories missing: {', '.join(missing)}")
    # One run over every package: importlib mode, because test files of different packages share
    # basenames (test_cli.py, test_abi.py). That mode puts no test dir on sys.path, so PYTHONPATH
    # does, for helper modules (zyfa_testutil, kernel_build_testlib...); their names must be unique
    # across packages, and no test may import `conftest` by name (there are several).
    pythonpath = os.pathsep.join([*(str(ROOT / d) for d in test_dirs), os.environ.get("PYTHONPATH", "")])
    session.run(
        "pytest",
        "--import-mode=importlib",
        "-ra",
        # The run's rootdir is the repo root, where no package's [tool.pytest.ini_options] is read:
        # register the markers they declare, and hold every test to them.
        "-o",
        "markers=" + "\n".join(pytest_markers()),
        "--strict-markers",
        *test_dirs,
        *session.posargs,
        # ZYFA_REQUIRE_CPP: zyfa-torch's tests of its C++ extension fail, not skip, when it was not built.
        env={"PYTHONPATH": pythonpath.rstrip(os.pathsep), "ZYFA_REQUIRE_CPP": "1"},
    )


@nox.session
def kernels(session: nox.Session) -> None:
    """bazel build //kernels:all, with the pinned toolchains on PATH; skips when bazel is absent."""
    bazel = shutil.which("bazel")
    if bazel is None:
        session.skip("bazel is not on PATH (Debian: apt-get install bazel-bootstrap); kernels not built")
    # The asmgen variants run the generator from packages/zyfa-asmgen/src: it needs that package's
    # own dependencies, as declared in its pyproject.toml.
    asmgen = tomllib.loads((ROOT / "packages" / "zyfa-asmgen" / "pyproject.toml").read_text())["project"]
    requirements = [pip_pin("ziglang"), *asmgen.get("dependencies", [])]
    flags = []
    if shutil.which("nvcc"):
        requirements.append(pip_pin("cutlass"))
    else:
        session.log("nvcc not found: the sm_90a variants are listed as skipped in the manifest")
        flags.append("--config=skip_missing")
    install(session, requirements)
    # The rules run python3 and nvcc from the client's PATH, where nox puts this venv first.
    try:
        session.run(bazel, "build", *flags, "//kernels:all", *session.posargs, external=True)
    finally:
        if os.environ.get("CI"):
            # Bazel leaves its server running; a CI run must leave no process behind.
            session.run(bazel, "shutdown", external=True)
    manifest = ROOT / "bazel-bin" / "kernels" / "manifest.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        session.log(
            f"{manifest.relative_to(ROOT)}: {len(data.get('kernels', []))} code objects, "
            f"{len(data.get('skipped', []))} skipped"
        )
        for row in data.get("skipped", []):
            session.log(f"  skipped {row.get('name')}: {row.get('reason')}")


@nox.session
def docs(session: nox.Session) -> None:
    """mkdocs build --strict (mkdocstrings reads each package's src/ directly, nothing installed)."""
    install(session, ["-r", "docs/requirements.txt"])
    quiet = {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's end-of-life banner, not a build problem
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"), env=quiet)


@nox.session
def demo(session: nox.Session) -> None:
    """Build and install ZYFA, run attention on the best device present (an sm90/gfx950 kernel through
    zyfa.flash_attn_func, else the CPU reference) in BF16 and FP8, compare with float64, print a table.

    The pip build of zyfa-core compiles the code objects the present toolchains allow, GPU or not."""
    install_zyfa(session, package_dirs(), ["rich==15.0.0"])
    session.run("python", "tools/demo.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Run zyfa-bench on the GPU; without one, print why and exit 0.

    Default: ZYFA's own kernels, throughput at the default shapes, JSON into .nox/bench-throughput.json.
    Args replace that: `nox -s bench -- accuracy --device cuda --impl all`."""
    gpu = gpu_present()
    if gpu is None:
        session.skip("bench needs a GPU (no /dev/nvidiactl or /dev/kfd here); nothing measured")
    install_zyfa(session, package_dirs())
    default = ["throughput", "--device", "cuda", "--impl", "zyfa", "--json", ".nox/bench-throughput.json"]
    session.run("zyfa-bench", *(session.posargs or default))
