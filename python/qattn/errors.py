"""Exceptions of the qattn binding. Every failure a user can reach is one of these, never a crash.

Each carries the diagnostic text of the pipeline (`code`, `codes`, `diagnostic`, `hint`): the same
stable codes the `qattn` command prints (SPEC0203, XL0303, BUILD0101, ...; docs/spec.md, docs/tl.md)
or a binding code PY#### (docs/python.md).
"""
import re

_DIAG = re.compile(r"\b(?:error|warning)\s+([A-Z]+[0-9]{4})\b")
_ERROR = re.compile(r"\berror\s+([A-Z]+[0-9]{4})\b")


def diagnostic_codes(text):
    """The diagnostic codes in the CLI's text: errors first, then warnings, each once."""
    out = []
    for c in _ERROR.findall(text) + _DIAG.findall(text):
        if c not in out:
            out.append(c)
    return out
_HINT = re.compile(r"^\s*hint:\s*(.*)$", re.M)


class QattnError(RuntimeError):
    """Base class. str(e) is the full diagnostic text; e.code the first diagnostic code."""

    def __init__(self, message, code=None, hint=None, diagnostic=None):
        self.diagnostic = diagnostic if diagnostic is not None else message
        found = diagnostic_codes(self.diagnostic)
        self.codes = ([code] if code else []) + [c for c in found if c != code]
        self.code = self.codes[0] if self.codes else None
        hints = _HINT.findall(self.diagnostic)
        self.hint = hint if hint is not None else (hints[0] if hints else None)
        text = message
        if code and code not in message:
            text = f"{code}: {message}"
        if hint and hint not in text:
            text += f"\n  hint: {hint}"
        super().__init__(text)


class SpecError(QattnError, ValueError):
    """The request cannot be served: bad spec, unsupported head dim / dtype / mask, bad tensor input."""


class ToolchainError(QattnError):
    """The pipeline cannot run here: no `qattn` executable, no nvcc, no CUTLASS headers, no torch."""


class BuildError(QattnError):
    """Planning, translation or nvcc failed (the CLI's diagnostics are attached)."""


class DeviceError(QattnError):
    """No CUDA device, tensors on the CPU or on different devices, a GPU without a qattn target."""


class LaunchError(QattnError):
    """qattn_fwd returned an error status (the library's qattn_last_error text is attached)."""


def error_for_codes(codes):
    """The exception class for a failed CLI run with these diagnostic codes."""
    for c in codes:
        if c in ("BUILD0101", "BUILD0102", "BUILD0103", "BUILD0202"):
            return ToolchainError
    for c in codes:
        # PLAN03xx: the spec's own variant expressions (score_mod / mask_mod) do not parse or type
        if c.startswith(("SPEC", "HW", "PLAN03")):
            return SpecError
    return BuildError
