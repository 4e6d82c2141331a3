"""qattn for PyTorch: attention kernels generated through the Thinking Language, built on first use.

    import qattn
    o = qattn.attention(q, k, v, causal=True)              # BSHD fp16/bf16 CUDA tensors
    o, lse = qattn.attention(q, k, v, return_lse=True, layout="bhsd")
    kern = qattn.compile("llama3-8b")                       # ahead of time (a preset, dict or JSON file)
    print(qattn.explain("llama3-8b", gpu="a100").tl)        # the TL program and the CUDA source
    qattn.precompile(qattn.COMMON_KERNELS, "pack", gpu="h100"); qattn.use_pack("pack")  # ship kernels

The kernels come from the `qattn` command (spec -> TL -> CUDA -> nvcc -> .so with a C ABI); this
package finds it ($QATTN_BIN, PATH, <repo>/build/qattn), runs it once per kernel and process, and
calls the library through ctypes. torch is imported only when needed. docs/python.md has the rest.
"""
from ._abi import QATTN_ABI_VERSION
from ._attention import attention
from ._compile import Explanation, Kernel, compile, compile_many, explain, precompile
from ._build import cache_dir, clear_memory_cache, kernel_spec
from ._kvcache import attention_with_kvcache, flash_mla_with_kvcache
from ._varlen import attention_varlen
from ._cli import find_executable, repo_root
from ._pack import COMMON_KERNELS, use_pack
from ._target import POLICY as TARGET_POLICY
from ._target import target_for_capability, target_for_gpu
from .errors import BuildError, DeviceError, LaunchError, QattnError, SpecError, ToolchainError

__version__ = "0.1.0"

# torch.ops.qattn.attention (qattn._op) is registered now when torch is already imported, so that
# torch.compile finds it before tracing; otherwise on the first qattn.attention call.
import sys as _sys

if "torch" in _sys.modules:
    try:
        from . import _op as _op_module

        _op_module.register(_sys.modules["torch"])
    except Exception:  # a torch without torch.library: attention() runs eagerly
        pass

__all__ = [
    "attention", "attention_with_kvcache", "flash_mla_with_kvcache", "attention_varlen", "compile", "compile_many", "explain", "precompile", "use_pack", "COMMON_KERNELS", "Kernel", "Explanation",
    "QattnError", "SpecError", "ToolchainError", "BuildError", "DeviceError", "LaunchError",
    "cache_dir", "clear_memory_cache", "kernel_spec", "find_executable", "repo_root",
    "target_for_capability", "target_for_gpu", "TARGET_POLICY", "QATTN_ABI_VERSION",
]
