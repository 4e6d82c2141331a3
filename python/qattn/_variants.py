"""Attention variants: the keyword arguments of qattn.attention() -> the spec fields they fix at
compile time. The ONE place to extend for a new variant (a score modification, another mask kind):
add the argument here and to `variant_fields`, and the rest of the binding follows (the fields
become part of the kernel key, the spec JSON and qattn.explain()).
"""
from .errors import SpecError

# FlashAttention's convention: a causal mask is aligned bottom-right (key j visible from query row
# i when j <= i + seqlen_k - seqlen_q). torch SDPA's is_causal is top-left: causal="top_left".
_CAUSAL = {False: None, None: None, True: "bottom_right", "bottom_right": "bottom_right", "top_left": "top_left"}


def _window(window, causal_align):
    """window=(left, right) or left (= (left, 0)); -1 on a side means unbounded (FlashAttention's
    window_size). With causal, right must be 0 (or -1): the window is causal sliding-window. The
    sizes are launch arguments: one kernel serves every window (split_launch_args)."""
    if isinstance(window, bool) or window is None:
        raise SpecError(f"window={window!r}: expected (left, right) or an int", code="PY0107")
    if isinstance(window, int):
        left, right = window, 0
    else:
        try:
            left, right = (int(x) for x in window)
        except (TypeError, ValueError):
            raise SpecError(f"window={window!r}: expected (left, right) with two ints", code="PY0107") from None
    if left < -1 or right < -1 or left >= 2**30 or right >= 2**30:
        raise SpecError(f"window=({left}, {right}): each side is >= 0, or -1 for unbounded", code="PY0107")
    if causal_align is not None:
        if causal_align == "top_left":
            raise SpecError("a sliding window is always aligned bottom-right; causal='top_left' cannot combine "
                            "with window", code="PY0107", hint="use causal=True (bottom-right) with the window")
        if right > 0:
            raise SpecError(f"causal=True with window right={right}: a causal window has right = 0",
                            code="PY0107", hint="pass window=(left, 0) or causal=False")
        right = 0
    if left < 0 and right < 0:
        return "none", None
    if left < 0 and right == 0:
        return "causal", None
    return "window", (left, right)  # a side may be -1 (unbounded): the kernel takes it at launch


# The spec keys that variant arguments fix at compile time: part of every kernel key and kernel spec.
VARIANT_KEYS = ("mask", "variants")


def variant_fields(causal=False, window=None, softcap=None, score_mod=None, mask_mod=None, prefix_lm=None,
                   alibi=False, document=False, relative_bias=None):
    """Spec fields ({"mask": ..., maybe "variants": ...}) for attention()'s variant arguments;
    SpecError when unsupported. score_mod / mask_mod are TL expressions (docs/spec.md, "Custom
    expressions"): one line each, checked by the spec validator and the interpreter when built.
    prefix_lm P (keys k <= q + off or k < P visible; no causal / window with it), alibi, document and
    relative_bias NB (the bucket count) are the spec's shorthands; the last three read auxiliary
    tensors at launch (attention()'s alibi_slopes, segment_ids, relative_bias)."""
    try:
        align = _CAUSAL[causal]
    except (KeyError, TypeError):
        raise SpecError(f"causal={causal!r}: expected True, False, 'bottom_right' or 'top_left'",
                        code="PY0107") from None
    if window is not None:
        kind, lr = _window(window, align)
        if kind == "window":
            fields = {"mask": {"kind": "window", "left": lr[0], "right": lr[1]}}
        elif kind == "causal":
            fields = {"mask": {"kind": "causal", "align": "bottom_right"}}
        elif align is not None:
            fields = {"mask": {"kind": "causal", "align": align}}
        else:
            fields = {"mask": {"kind": "none"}}
    elif align is None:
        fields = {"mask": {"kind": "none"}}
    else:
        fields = {"mask": {"kind": "causal", "align": align}}
    if softcap is not None and softcap != 0:
        try:
            c = float(softcap)
        except (TypeError, ValueError):
            raise SpecError(f"softcap={softcap!r} is not a number", code="PY0107") from None
        if not c > 0 or c != c or c == float("inf"):
            raise SpecError(f"softcap={softcap!r}: expected a finite number > 0", code="PY0107")
        fields["variants"] = {"softcap": c}
    for key, text in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if text is None:
            continue
        if not isinstance(text, str) or not text.strip():
            raise SpecError(f"{key}={text!r}: expected a TL expression (a non-empty string)", code="PY0107",
                            hint="e.g. mask_mod='kv_idx <= q_idx + seqlen_k - seqlen_q' (docs/spec.md, Variants)")
        fields.setdefault("variants", {})[key] = text.strip()
    if prefix_lm is not None:
        if isinstance(prefix_lm, bool) or not isinstance(prefix_lm, int) or prefix_lm < 0:
            raise SpecError(f"prefix_lm={prefix_lm!r}: expected an int >= 0 (the prefix length)", code="PY0107")
        if align is not None or window is not None:
            raise SpecError("prefix_lm is causal past its prefix by itself: it does not combine with causal or window",
                            code="PY0107", hint="call with prefix_lm=P alone (keys k <= q + seqlen_k - seqlen_q or "
                                                "k < P are visible)")
        fields.setdefault("variants", {})["prefix_lm"] = prefix_lm
    if alibi:
        fields.setdefault("variants", {})["alibi"] = True
    if document:
        fields.setdefault("variants", {})["document"] = True
    if relative_bias is not None:
        nb = relative_bias
        if isinstance(nb, bool) or not isinstance(nb, int) or nb < 2 or nb > 4096 or nb % 2:
            raise SpecError(f"relative_bias table with {nb!r} buckets: expected an even count in 2..4096",
                            code="PY0110", hint="pass a (heads_q, NB) float32 table with NB even")
        fields.setdefault("variants", {})["relative_bias"] = nb
    return fields


# Auxiliary inputs (docs/spec.md, "Auxiliary inputs"): ABI name -> the attention() argument that
# carries it (the kernel's info says its dtype and shape).
AUX_INPUTS = {"alibi_slopes": "alibi_slopes", "seg_q": "segment_ids[0]", "seg_k": "segment_ids[1]",
              "rel_bias": "relative_bias"}


def aux_arguments(alibi_slopes=None, segment_ids=None, relative_bias=None):
    """({ABI name: tensor}, compile-time flags for variant_fields) from attention()'s tensor arguments."""
    aux, flags = {}, {}
    if alibi_slopes is not None:
        aux["alibi_slopes"] = alibi_slopes
        flags["alibi"] = True
    if segment_ids is not None:
        if not isinstance(segment_ids, (tuple, list)) or len(segment_ids) != 2:
            raise SpecError("segment_ids: expected a pair (seg_q, seg_k) of (batch, seqlen) int tensors", code="PY0110",
                            hint="for self-attention over packed sequences pass (seg, seg)")
        aux["seg_q"], aux["seg_k"] = segment_ids
        flags["document"] = True
    if relative_bias is not None:
        if not hasattr(relative_bias, "shape") or len(relative_bias.shape) != 2:
            raise SpecError("relative_bias: expected a (heads_q, NB) float32 tensor (one bias per head and bucket)",
                            code="PY0110")
        aux["rel_bias"] = relative_bias
        flags["relative_bias"] = int(relative_bias.shape[1])
    return aux, flags


# The kernel's copy of a window and a softcap: the values are launch arguments (the TL builtins
# window_left, window_right, softcap; include/qattn/qattn.h ABI 3), so every window shares one kernel
# and every cap another. The canonical values are what `qattn generate` verifies the kernel with
# (besides its own windows, src/plan/plan.cc).
CANONICAL_WINDOW = (256, 0)
CANONICAL_SOFTCAP = 30.0


def split_launch_args(fields):
    """(kernel fields, launch args) of attention()'s variant fields: the fields with the window
    sizes and the softcap replaced by canonical values (the kernel key), and {"window": (l, r),
    "softcap": c} with the call's values (only the ones present)."""
    args, out = {}, dict(fields)
    mask = fields.get("mask", {})
    if mask.get("kind") == "window":
        args["window"] = (int(mask["left"]), int(mask["right"]))
        out["mask"] = {"kind": "window", "left": CANONICAL_WINDOW[0], "right": CANONICAL_WINDOW[1]}
    var = fields.get("variants", {})
    if "softcap" in var:
        args["softcap"] = float(var["softcap"])
        out["variants"] = dict(var, softcap=CANONICAL_SOFTCAP)
    return out, args


def fields_of_spec(spec):
    """The variant fields of a canonical spec (what variant_fields() returns for attention())."""
    return {k: spec[k] for k in VARIANT_KEYS if k in spec}


def variant_tag(fields):
    """A short name for kernel names: none, causal, causal_tl, window, causal_softcap (window sizes and
    the softcap are launch arguments, not part of the kernel)."""
    mask = fields.get("mask", {"kind": "none"})
    kind = mask.get("kind", "none")
    if kind == "causal":
        tag = "causal_tl" if mask.get("align") == "top_left" else "causal"
    elif kind == "window":
        tag = "window"
    else:
        tag = kind
    for k, v in sorted(fields.get("variants", {}).items()):
        if isinstance(v, str):  # a TL expression: a short digest (names only; the key is the whole spec)
            import hashlib
            val = hashlib.sha1(v.encode()).hexdigest()[:8]
        elif k == "softcap":
            val = ""
        else:
            val = "" if v is True else ("%g" % v if isinstance(v, float) else str(v))
        tag += "_" + "".join(c if c.isalnum() else "_" for c in f"{k}{val}")[:24]
    return tag
