"""No subprocess is ever started through a shell (issue 18): the Python package, its setup.py,
the GPU test drivers (tests/gpu), the benchmarks (bench), the binding's tests (tests/python) and
any Python under scripts/ and tools/ start processes from argv lists only.

The check reads each file's syntax tree (ast), with import aliases resolved, and reports:
os.system / os.popen, subprocess.getoutput / getstatusoutput, asyncio.create_subprocess_shell,
importing any of these by name, any call with shell= other than False, a subprocess call whose
command is a string (a literal, an f-string or a concatenation), and argv that starts a shell
itself (sh/bash -c) through subprocess or os.exec*/os.spawn*. It checks itself first on
tests/hostile/names/shell_use.py, whose `# SHELL` lines it must find, and no others.
CPU only (no torch); ctest runs it as python.no_shell.
"""
import ast
import glob
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AUDITED = ["python/**/*.py", "tests/gpu/**/*.py", "tests/python/**/*.py", "bench/**/*.py", "scripts/**/*.py",
           "tools/**/*.py", "examples/**/*.py"]

SHELL_FUNCS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
               ("asyncio", "create_subprocess_shell")}
PROCESS_FUNCS = {("subprocess", n) for n in ("run", "call", "check_call", "check_output", "Popen")}
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash", "/usr/bin/env"}


def _is_stringy(node):
    """A command written as a string: a literal, an f-string, or + / % / .format of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _is_stringy(node.left) or _is_stringy(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join"):
        return _is_stringy(node.func.value)
    return False


def _const(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _starts_shell(args):
    """argv (a list literal, or exec/spawn positional args) that runs `sh -c ...`."""
    strs = [_const(a) for a in args]
    return len(strs) >= 2 and strs[0] in SHELLS and "-c" in strs[1:]


def findings(path):
    """[(line, what)] for every shell use in the file at `path`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    modules = {}  # local name -> module ("sp" -> "subprocess")
    names = {}    # local name -> (module, function) for `from m import f`
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = (node.module, a.name)
                if (node.module, a.name) in SHELL_FUNCS:
                    out.append((node.lineno, f"imports {node.module}.{a.name}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = None
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id in modules:
            fn = (modules[node.func.value.id], node.func.attr)
        elif isinstance(node.func, ast.Name) and node.func.id in names:
            fn = names[node.func.id]
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                out.append((node.lineno, "shell= other than False"))
        if fn in SHELL_FUNCS:
            out.append((node.lineno, f"{fn[0]}.{fn[1]} runs a shell"))
        elif fn in PROCESS_FUNCS and node.args:
            cmd = node.args[0]
            if _is_stringy(cmd):
                out.append((node.lineno, f"{fn[0]}.{fn[1]} with a string command"))
            elif isinstance(cmd, (ast.List, ast.Tuple)) and _starts_shell(cmd.elts):
                out.append((node.lineno, f"{fn[0]}.{fn[1]} starts a shell (sh -c)"))
        elif fn and fn[0] == "os" and fn[1].startswith(("exec", "spawn")):
            args = node.args[1:] if fn[1].startswith("spawn") else node.args
            if _starts_shell(args) or (len(args) >= 3 and _const(args[1]) in SHELLS and "-c" in [_const(a) for a in args[2:]]):
                out.append((node.lineno, f"os.{fn[1]} starts a shell (sh -c)"))
    return sorted(set(out))


def test_the_check_finds_every_shell_use_in_the_hostile_sample():
    sample = os.path.join(REPO, "tests", "hostile", "names", "shell_use.py")
    with open(sample, encoding="utf-8") as f:
        marked = {i for i, line in enumerate(f, 1) if line.rstrip().endswith("# SHELL")}
    assert len(marked) >= 15
    found = {line for line, _ in findings(sample)}
    assert found == marked, f"missed {sorted(marked - found)}, wrongly flagged {sorted(found - marked)}"


def test_no_python_file_starts_a_process_through_a_shell():
    files = sorted({p for pat in AUDITED for p in glob.glob(os.path.join(REPO, pat), recursive=True)})
    rel = [os.path.relpath(p, REPO) for p in files]
    assert "python/qattn/_cli.py" in rel and "bench/bench_attention.py" in rel and "tests/gpu/verify.py" in rel
    bad = [f"{r}:{line}: {what}" for p, r in zip(files, rel) for line, what in findings(p)]
    assert not bad, "processes started through a shell (use an argv list):\n" + "\n".join(bad)


# ---- C and C++: the sources, tests and tools start processes through support::run_process or
# posix_spawn with argv vectors; a call of system(), popen() or an exec of a shell with -c is
# reported (comments and string literals are blanked first, so a hint that names system() is no
# finding). tests/hostile/ holds hostile code on purpose and is not audited.
import re

CXX_AUDITED = ["src/**/*.cc", "src/**/*.h", "tests/unit/**/*.cc", "tests/unit/**/*.h", "tests/llm/**/*.h",
               "tests/fuzz/**/*.cc", "tests/emit/**/*.cc", "tools/**/*.cc", "device/**/*.cuh", "include/**/*.h"]
CXX_SHELL = re.compile(r"(?<![\w.>:])(?:std::)?(system|popen|execl|execlp)\s*\(")


def _blank_comments_and_strings(text):
    """The text with comments and string / char literals replaced by spaces (line numbers kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', text[i:]):
            delim = re.match(r'R"([^(\s]*)\(', text[i:]).group(1)
            j = text.find(")" + delim + '"', i)
            j = n if j < 0 else j + len(delim) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def cxx_findings(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        code = _blank_comments_and_strings(f.read())
    return [(code.count("\n", 0, m.start()) + 1, m.group(1) + "()") for m in CXX_SHELL.finditer(code)]


def test_the_cxx_check_finds_system_and_popen_calls(tmp_path):
    sample = tmp_path / "s.cc"
    sample.write_text('// system("x") in a comment\nconst char* h = "call popen(";\nint a = std::system(cmd);\n'
                      'FILE* f = popen(c, "r");\nrun_process({"x"}); obj.system(1); my_system(2);\n')
    assert [line for line, _ in cxx_findings(sample)] == [3, 4]


def test_no_cxx_file_starts_a_process_through_a_shell():
    files = sorted({p for pat in CXX_AUDITED for p in glob.glob(os.path.join(REPO, pat), recursive=True)})
    rel = [os.path.relpath(p, REPO) for p in files]
    assert "src/support/process.cc" in rel and "tests/unit/emit_compile_test.cc" in rel
    bad = [f"{r}:{line}: {what}" for p, r in zip(files, rel) for line, what in cxx_findings(p)]
    assert not bad, "processes started through a shell (use support::run_process with argv):\n" + "\n".join(bad)
