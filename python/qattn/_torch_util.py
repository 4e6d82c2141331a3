"""torch, imported only when a function needs it (`import qattn` works without torch)."""
from .errors import ToolchainError


def import_torch():
    try:
        import torch
    except ImportError as e:
        raise ToolchainError(f"this needs PyTorch, which is not importable here ({e})", code="PY0204",
                             hint="pip install torch (a CUDA build) to run qattn kernels") from None
    return torch
