"""The kernels the GPU tests use, as compile() specs: few distinct kernels, each reused over many
shapes (batch, heads, sequence lengths and layouts are runtime arguments). tests/gpu/python_suite.sh
builds these (and the benchmark's) in parallel before pytest runs."""
D128_NONE = {"heads_q": 2, "head_dim": 128, "dtype": "bf16", "mask": "none"}
D128_CAUSAL = {"heads_q": 2, "head_dim": 128, "dtype": "bf16", "mask": "causal"}
MLA_CAUSAL = {"heads_q": 2, "head_dim_qk": 192, "head_dim_v": 128, "dtype": "bf16", "mask": "causal"}
FP16_D64_CAUSAL_LSE = {"heads_q": 2, "head_dim": 64, "dtype": "fp16", "mask": "causal", "return_lse": True}
FP16_D64_WINDOW = {"heads_q": 2, "head_dim": 64, "dtype": "fp16", "mask": {"kind": "window", "left": 37, "right": 5}}
FP16_D64_CAUSAL_TL = {"heads_q": 2, "head_dim": 64, "dtype": "fp16", "mask": "causal_top_left"}

TEST_KERNELS = [D128_NONE, D128_CAUSAL, MLA_CAUSAL, FP16_D64_CAUSAL_LSE, FP16_D64_WINDOW, FP16_D64_CAUSAL_TL]
