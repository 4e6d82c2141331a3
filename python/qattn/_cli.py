"""Running the `qattn` command (the pipeline) from Python.

Where things are found (docs/python.md):
  the executable   $QATTN_BIN, else the `qattn` that `pip install .` put beside this interpreter
                   (its scripts folder), else `qattn` on PATH, else <repo>/build/qattn
  the repository   $QATTN_HOME, else the checkout around this file (running from python/ in the
                   source tree); an installed compiler needs none (it reads <prefix>/share/qattn).
                   The binding passes the repository on as QATTN_HOME when it is not set.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading

from .errors import QattnError, ToolchainError, error_for_codes

_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_repo(path):
    return bool(path) and os.path.isfile(os.path.join(path, "include", "qattn", "qattn.h"))


def repo_root():
    """The qattn checkout (for the device runtime headers and build/qattn), or None."""
    env = os.environ.get("QATTN_HOME")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(_HERE))
    return repo if _is_repo(repo) else None


def find_executable():
    """Path of the `qattn` executable; ToolchainError (PY0201) when there is none."""
    tried = []
    env = os.environ.get("QATTN_BIN")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise ToolchainError(f"QATTN_BIN={env} is not an executable file", code="PY0201",
                             hint="point QATTN_BIN at a `qattn` executable (pip install . installs one; "
                                  "scripts/build.sh builds build/qattn)")
    tried.append("$QATTN_BIN (unset)")
    if repo_root() is None:  # an installed package: the compiler `pip install .` put beside it
        beside = os.path.join(sysconfig.get_path("scripts"), "qattn")
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
        tried.append(beside)
    on_path = shutil.which("qattn")
    if on_path:
        return on_path
    tried.append("`qattn` on PATH")
    repo = repo_root()
    if repo:
        cand = os.path.join(repo, "build", "qattn")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
        tried.append(cand)
    else:
        tried.append("<repo>/build/qattn (no repository known: QATTN_HOME unset)")
    raise ToolchainError("the `qattn` executable was not found; tried " + ", ".join(tried), code="PY0201",
                         hint="install it with `pip install .` in the repository (or build it with "
                              "`bash scripts/build.sh`), or set QATTN_BIN")


def _env():
    env = dict(os.environ)
    repo = repo_root()
    if repo and not env.get("QATTN_HOME"):
        env["QATTN_HOME"] = repo
    env.setdefault("PYTHON", sys.executable)  # `qattn generate` runs `python -m qattn.verify` with it
    return env


class Result:
    def __init__(self, rc, stdout, stderr):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr


def run(args, progress=None, timeout=None):
    """Runs `qattn ARGS`; stderr lines go to progress(line) as they come. Returns a Result."""
    exe = find_executable()
    try:
        proc = subprocess.Popen([exe] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_env(), errors="replace")
    except OSError as e:
        raise ToolchainError(f"cannot run {exe}: {e}", code="PY0201") from None
    err_lines = []

    def pump():
        for line in proc.stderr:
            err_lines.append(line)
            if progress is not None:
                progress(line.rstrip("\n"))

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    try:
        out = proc.stdout.read()
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise QattnError(f"`qattn {' '.join(args)}` did not finish in {timeout} s", code="PY0202") from None
    t.join()
    return Result(proc.returncode, out, "".join(err_lines))


def check(result, what):
    """Raises the QattnError subclass that the CLI's diagnostics call for when `result` failed."""
    if result.rc == 0:
        return
    text = result.stderr.strip()
    if result.rc < 0:
        raise QattnError(f"{what}: the qattn command was killed by signal {-result.rc}\n{text}", code="PY0202")
    from .errors import _ERROR, diagnostic_codes
    codes = diagnostic_codes(text)
    cls = error_for_codes(_ERROR.findall(text) or codes)
    if not codes:
        raise cls(f"{what} failed (exit status {result.rc}):\n{text}", code="PY0202")
    # keep the diagnostic lines and their notes/hints; drop progress lines ("[1/4] ...")
    lines = [ln for ln in text.splitlines() if not ln.startswith("[") and not ln.startswith("      ")]
    raise cls(f"{what} failed:\n" + "\n".join(lines), diagnostic=text)


_GPUS = None


def gpu_table():
    """data/gpus.json as the CLI embeds it: a list of GPU entries (name, aliases, sm, ...)."""
    global _GPUS
    if _GPUS is None:
        r = run(["gpus", "--json"])
        check(r, "qattn gpus --json")
        try:
            _GPUS = json.loads(r.stdout)["gpus"]
        except (ValueError, KeyError) as e:
            raise QattnError(f"unreadable `qattn gpus --json` output: {e}", code="PY0202") from None
    return _GPUS
