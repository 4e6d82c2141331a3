"""The C ABI's parameter struct as a C compiler lays it out (include/qattn/qattn.h) against the ctypes
mirror the binding fills (qattn._abi.Params). No torch and no GPU: it runs in the CPU CI (it ran only
with the GPU tests before, inside test_kvcache.py, and went stale there when ABI 7 added sm_margin)."""
from conftest import c_layout


def test_fwd_params_offsets_match_a_c_compiler(tmp_path):
    """offsetof / sizeof of qattn_fwd_params (ABI 4: the page fields, ABI 5: the packed row counts, ABI
    7: sm_margin, ABI 8: splits, ABI 10: the merged result at the end) by the C compiler = ctypes' layout
    (qattn._abi.Params)."""
    import ctypes

    from qattn import _abi
    names = [f[0] for f in _abi.Params._fields_]
    want = [getattr(_abi.Params, n).offset for n in names] + [ctypes.sizeof(_abi.Params)]
    assert c_layout(tmp_path, "qattn_fwd_params", names) == want
    assert names[-12:] == ["page_size", "pages", "num_pages", "total_q", "total_k", "sm_margin", "splits",
                           "o_merged", "lse_merged", "om_batch_stride", "om_row_stride", "om_head_stride"]
