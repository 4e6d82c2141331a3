"""FlashMLA's Python interface on qattn's absorbed-MLA kernel (DeepSeek-V3 decoding; docs/python.md,
"Absorbed MLA decoding"): code written for FlashMLA switches by its import,

    from qattn.flash_mla_interface import get_mla_metadata, flash_mla_with_kvcache

with the same arguments and results. get_mla_metadata returns tensors of FlashMLA's types
(tile_scheduler_metadata (0, 8) int32 and num_splits (batch + 1,) int32 of zeros) that
flash_mla_with_kvcache takes and does not read: qattn's kernel splits each sequence's keys in its TL,
by a choice made at the call from the batch, the heads and the cache's capacity (qattn._kvcache.mla_splits).
"""
from ._kvcache import flash_mla_with_kvcache
from ._torch_util import import_torch
from .errors import SpecError

__all__ = ["get_mla_metadata", "flash_mla_with_kvcache"]


def get_mla_metadata(cache_seqlens, num_heads_per_head_k, num_heads_k):
    """FlashMLA's scheduling metadata for (cache_seqlens (batch,) int32, query heads per kv head, kv
    heads): placeholders qattn's flash_mla_with_kvcache accepts and ignores (see the module's text)."""
    torch = import_torch()
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dim() != 1:
        raise SpecError("cache_seqlens: expected a (batch,) integer tensor", code="PY0105")
    for name, n in (("num_heads_per_head_k", num_heads_per_head_k), ("num_heads_k", num_heads_k)):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise SpecError(f"{name}={n!r}: expected a positive int", code="PY0105")
    dev = cache_seqlens.device
    return (torch.empty((0, 8), dtype=torch.int32, device=dev),
            torch.zeros(int(cache_seqlens.shape[0]) + 1, dtype=torch.int32, device=dev))
