"""Op categories (perfdiff.analyze.categories): literal CUDA and ROCm names of each family, the
rule table's own examples, and the real cross-vendor traces' kernels."""
from __future__ import annotations

import math

import pytest
from conftest import REAL

from perfdiff.analyze.categories import RULES, category_table, classify, unmatched_gpu_share
from perfdiff.analyze.records import FunctionStats
from perfdiff.analyze.records import OpCategory as C

# Literal names, as the profilers write them: CUDA (cuBLAS, CUTLASS, cuDNN, PyTorch, Triton,
# NCCL) and ROCm (hipBLASLt/Tensile, rocBLAS, MIOpen, CK/Triton attention, RCCL).
NAMES = [
    # GEMM
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", C.GEMM),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", C.GEMM),
    ("ampere_sgemm_128x64_tn", C.GEMM),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_tn", C.GEMM),
    ("volta_h884gemm_64x64_ldg8_nn", C.GEMM),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)", C.GEMM),
    ("void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<…>>(…)", C.GEMM),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, false, false>(…)", C.GEMM),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(…)", C.GEMM),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", C.GEMM),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1",
     C.GEMM),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3", C.GEMM),
    ("void rocblas_gemvt_kernel<64, 16, float, float const*, float*>(…)", C.GEMM),
    ("triton_tem_fused_addmm_0", C.GEMM),
    ("triton_tem_fused_mm_1", C.GEMM),
    ("aten::mm", C.GEMM), ("aten::addmm", C.GEMM), ("aten::bmm", C.GEMM), ("aten::linear", C.GEMM),
    ("aten::matmul", C.GEMM),
    # attention
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<…>>>(…)", C.ATTENTION),
    ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t>>(…)",
     C.ATTENTION),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<…>::Params)", C.ATTENTION),
    ("attn_fwd", C.ATTENTION),
    ("_attn_fwd_kernel", C.ATTENTION),
    ("void vllm::paged_attention_v2_kernel<unsigned short, unsigned short, 128, 16, 128>(…)", C.ATTENTION),
    ("qk_int_sv_f8_attn_kernel", C.ATTENTION),
    ("sageattn_qk_int8_pv_fp16_cuda", C.ATTENTION),
    ("ck_tile::FmhaFwdKernel<…>", C.ATTENTION),
    ("triton_tem_fused__scaled_dot_product_flash_attention_0", C.ATTENTION),
    ("aten::scaled_dot_product_attention", C.ATTENTION), ("aten::_flash_attention_forward", C.ATTENTION),
    # convolution
    ("sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_stage4", C.CONVOLUTION),
    ("sm86_xmma_dgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nchw", C.CONVOLUTION),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(…)",
     C.CONVOLUTION),
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(…)", C.CONVOLUTION),
    ("igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt128x128x32_wt32x32x8_ws2x1_wr2x2_ta1x8x4x1_1x4x1x64", C.CONVOLUTION),
    ("naive_conv_fwd_nchw_float_double_float", C.CONVOLUTION),
    ("MIOpenConvUni", C.CONVOLUTION),
    ("aten::convolution", C.CONVOLUTION), ("aten::cudnn_convolution", C.CONVOLUTION),
    # normalization
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(…)",
     C.NORMALIZATION),
    ("void at::native::batch_norm_collect_statistics_kernel<float, float, float, int>(…)", C.NORMALIZATION),
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 1>(…)", C.NORMALIZATION),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(…)", C.NORMALIZATION),
    ("MIOpenBatchNormFwdTrainSpatial", C.NORMALIZATION),
    ("triton_per_fused_native_layer_norm_0", C.NORMALIZATION),
    ("aten::layer_norm", C.NORMALIZATION), ("aten::group_norm", C.NORMALIZATION),
    # reduction / softmax
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(…)",
     C.REDUCTION),
    ("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 7, false, false>(…)",
     C.REDUCTION),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, Epilogue>(…)",
     C.REDUCTION),
    ("triton_red_fused_sum_0", C.REDUCTION), ("triton_per_fused__softmax_0", C.REDUCTION),
    ("aten::softmax", C.REDUCTION), ("aten::sum", C.REDUCTION),
    # elementwise / activation
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
     C.ELEMENTWISE),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl(…)>(…)", C.ELEMENTWISE),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(…)>(…)", C.ELEMENTWISE),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>(…)", C.ELEMENTWISE),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int>(…)",
     C.ELEMENTWISE),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<…>(…)", C.ELEMENTWISE),
    ("triton_poi_fused_add_mul_0", C.ELEMENTWISE),
    ("aten::add", C.ELEMENTWISE), ("aten::gelu", C.ELEMENTWISE), ("aten::copy_", C.ELEMENTWISE),
    # communication
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", C.COMMUNICATION),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", C.COMMUNICATION),
    ("void ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(…)", C.COMMUNICATION),
    ("rcclKernel_AllReduce_RING_LL_Sum_bf16", C.COMMUNICATION),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(…)", C.COMMUNICATION),
    ("nccl:all_reduce", C.COMMUNICATION), ("c10d::allreduce_", C.COMMUNICATION),
    # nothing known
    ("my_custom_kernel", C.OTHER),
    ("void convert_fp8_kernel<float>(…)", C.OTHER),
]


@pytest.mark.parametrize(("name", "category"), NAMES, ids=[n[:60] for n, _ in NAMES])
def test_literal_names(name: str, category: C) -> None:
    assert classify(name) == category


def test_every_family_has_cuda_and_rocm_names() -> None:
    by = {c: [n for n, k in NAMES if k == c] for c in C}
    for c in (C.GEMM, C.ATTENTION, C.CONVOLUTION, C.NORMALIZATION, C.COMMUNICATION):
        assert len(by[c]) >= 3, c


@pytest.mark.parametrize("rule", range(len(RULES)))
def test_each_rule_classifies_its_own_examples(rule: int) -> None:
    r = RULES[rule]
    assert r.examples
    for name in r.examples:
        assert classify(name) == r.category, name


def test_copies_and_sets_go_by_kind_not_name() -> None:
    assert classify("Memcpy HtoD (Pageable -> Device)", "memcpy") == C.MEMCPY
    assert classify("Memset (Device)", "memset") == C.MEMCPY
    assert classify("gemm-named copy", "memcpy") == C.MEMCPY


def _f(name: str, kind: str, t_n: float, t_a: float, presence: str = "both", calls: float = 1.0) -> FunctionStats:
    nan = math.nan
    return FunctionStats(name=name, device="GPU 0", kind=kind, wait=False, presence=presence, tested=False,
                         t_n_us=t_n, t_a_us=t_a, tau_pp=nan, t=None, q_t=nan, beta_n=nan, beta_a=nan, d_beta=nan,
                         beta=None, q_beta=nan, presence_n=1.0, presence_a=1.0,
                         calls_n=calls if presence != "new" else 0.0, calls_a=calls if presence != "vanished" else 0.0,
                         per_call_n_us=nan, per_call_a_us=nan)


def test_category_table_sums_gpu_time_per_category() -> None:
    fs = [_f("sm90_xmma_gemm_bf16_cublas", "kernel", 60.0, 0.0, "vanished", 4),
          _f("Cijk_Alik_Bljk_HHS", "kernel", 0.0, 50.0, "new", 4),
          _f("flash_fwd_kernel", "kernel", 20.0, 0.0, "vanished", 2),
          _f("attn_fwd", "kernel", 0.0, 40.0, "new", 2),
          _f("Memcpy DtoH (Device -> Pinned)", "memcpy", 20.0, 10.0),
          _f("aten::mm", "cpu", 500.0, 500.0)]  # CPU-side: not GPU time
    rows = {r.category: r for r in category_table(fs)}
    assert set(rows) == {C.GEMM, C.ATTENTION, C.MEMCPY}
    g = rows[C.GEMM]
    assert (g.t_n_us, g.t_a_us, g.d_us, g.calls_n, g.calls_a) == (60.0, 50.0, -10.0, 4.0, 4.0)
    assert (g.functions_n, g.functions_a) == (1, 1)
    assert g.share_n_pct == pytest.approx(60.0) and g.share_a_pct == pytest.approx(50.0)
    assert rows[C.ATTENTION].share_a_pct == pytest.approx(40.0)
    assert sum(r.share_n_pct for r in rows.values()) == pytest.approx(100.0)
    assert unmatched_gpu_share(fs) == pytest.approx(170.0 / 200.0)


BERT = ("h100", "mi300")


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not found at {REAL}")
@pytest.mark.parametrize("gpu", BERT)
def test_real_bert_small_kernels_classified(gpu: str) -> None:
    """bert-small on an H100 (cuBLAS/CUTLASS, FlashAttention) and an MI300X (hipBLASLt Cijk_,
    attn_fwd): the importer's kernel names fall in the same categories on both sides, none
    in other; GEMM is the largest, attention, normalization and elementwise present."""
    from perfdiff.inputs import open_run
    from perfdiff.model.schema import GPU_KINDS

    run = open_run(REAL / "AMD-AGI" / "TraceLens" / "tests" / "traces" / gpu / "gaunernst_bert-small-uncased__1016001.json.gz")
    a = run.activity[run.activity["kind"].astype(str).isin(GPU_KINDS)]
    dur = (a["end_ns"] - a["start_ns"]).to_numpy(dtype=float)
    share: dict[C, float] = {}
    count: dict[C, int] = {}
    for name, kind, d in zip(a["function"].astype(str), a["kind"].astype(str), dur, strict=True):
        c = classify(name, kind)
        share[c] = share.get(c, 0.0) + d
        count[c] = count.get(c, 0) + 1
    total = sum(share.values())
    pct = {c: 100.0 * v / total for c, v in share.items()}
    assert share.get(C.OTHER, 0.0) == 0.0  # measured: 0 % other on both sides
    assert count == {C.GEMM: 26, C.ATTENTION: 4, C.NORMALIZATION: 10, C.ELEMENTWISE: 19, C.REDUCTION: 1,
                     C.MEMCPY: 1}
    assert max(pct, key=pct.get) == C.GEMM  # H100 64 %, MI300X 45 % of the GPU time
    assert pct[C.ATTENTION] > 10.0  # H100 12 %, MI300X 29 %
