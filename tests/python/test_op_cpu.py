"""The operators' registrations on the CPU (torch needed, no GPU): torch.ops.qattn.attention and
torch.ops.qattn.attention_backward exist, their fake implementations give the shapes and dtypes
the real ones return (what torch.compile traces with), and the forward carries an autograd formula."""
import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from qattn import _op  # noqa: E402


def _ops():
    op = _op.register(torch)
    assert op is torch.ops.qattn.attention
    return op, torch.ops.qattn.attention_backward


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_fake_shapes_of_forward_and_backward(layout):
    op, bwd = _ops()
    with FakeTensorMode():
        shape_q = (2, 77, 4, 192) if layout == "bshd" else (2, 4, 77, 192)
        shape_k = (2, 130, 2, 192) if layout == "bshd" else (2, 2, 130, 192)
        shape_v = (2, 130, 2, 128) if layout == "bshd" else (2, 2, 130, 128)
        q = torch.empty(shape_q, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(shape_k, dtype=torch.bfloat16, device="cuda")
        v = torch.empty(shape_v, dtype=torch.bfloat16, device="cuda")
        o, lse = op(q, k, v, "bottom_right", None, None, None, True, layout, None, None, None, None, None, None, None)
        assert o.shape == shape_q[:3] + (128,) and o.dtype == torch.bfloat16
        assert lse.shape == (2, 4, 77) and lse.dtype == torch.float32
        _, empty = op(q, k, v, "none", None, None, None, False, layout, None, None, None, None, None, None, None)
        assert empty.shape == (0,)
        dq, dk, dv = bwd(q, k, v, o, lse, o, "bottom_right", None, None, layout)
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
        assert dq.dtype == dk.dtype == dv.dtype == torch.bfloat16


def test_forward_operator_has_an_autograd_formula():
    """Gradients through the forward operator reach torch.ops.qattn.attention_backward (the fake
    tensors run setup_context and the formula), with the inputs' shapes; a call with a variant
    (softcap) has no backward (PY0109)."""
    op, _ = _ops()
    # meta tensors: the fake implementations, and the autograd engine without a GPU
    q = torch.empty(1, 40, 4, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    k = torch.empty(1, 50, 2, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    v = torch.empty(1, 50, 2, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    o, lse = op(q, k, v, "top_left", None, None, None, True, "bshd", None, None, None, None, None, None, None)
    assert o.grad_fn is not None
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), torch.empty_like(o))
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    o2, _ = op(q, k, v, "none", None, None, 30.0, True, "bshd", None, None, None, None, None, None, None)
    import qattn
    with pytest.raises(qattn.SpecError) as e:
        torch.autograd.grad(o2, (q,), torch.empty_like(o2))
    assert e.value.code == "PY0109"


def test_learnable_alibi_slopes_and_bias_tables():
    """Which auxiliary inputs autograd asks gradients for (qattn._attention.learnable: the backward
    kernel's aux_grad), and the paths that compute none refuse them (PY0109) instead of leaving their
    .grad at None: torch.compile's operator, a compiled forward Kernel."""
    import qattn
    from qattn import _attention as A
    slopes = torch.ones(4, requires_grad=True)
    table = torch.zeros(4, 8, requires_grad=True)
    seg = torch.zeros(1, 40, dtype=torch.int32)
    assert A.learnable(torch, {"alibi_slopes": slopes, "rel_bias": table, "seg_q": seg}) == ["alibi_slopes", "rel_bias"]
    assert A.learnable(torch, {"alibi_slopes": slopes.detach(), "rel_bias": table}) == ["rel_bias"]
    with torch.no_grad():
        assert A.learnable(torch, {"alibi_slopes": slopes}) == []
        A.refuse_aux_grad(torch, slopes, table)  # grad mode off: nothing to refuse
    for kw in (dict(alibi_slopes=slopes), dict(relative_bias=table)):
        with pytest.raises(qattn.SpecError) as e:
            A.refuse_aux_grad(torch, **kw)
        assert e.value.code == "PY0109" and next(iter(kw)) in str(e.value) and "eagerly" in e.value.hint
    A.refuse_aux_grad(torch, slopes.detach(), table.detach())
