"""The shared rule tables: kernel categories and functional blocks (one parser, typed errors)."""
from __future__ import annotations

import pytest

from mcp_server.compare.blocks import load_blocks
from mcp_server.core.categories import DEFAULT_CATEGORY, load_categories, parse_categories
from mcp_server.core.errors import CategoriesError, FileMissingError

# Kernel names as they appear in the H200 fixtures and in public NVIDIA / AMD traces.
CASES = {
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "cross_device_reduce_1stage<__hip_bfloat16, 8>": "communication",
    "Memcpy DtoH (Device -> Pinned)": "memcpy",
    "Memset (Device)": "memset",
    "fused_moe_kernel": "moe",
    "void aiter::moe_sorting_kernel<...>": "moe",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0": "attention",
    "void at::native::(anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, float, 8, false, "
    "false>": "attention",
    "flashinfer::BatchPrefillWithPagedKVCacheKernel": "attention",
    "_fwd_grouped_kernel_stage1": "attention",  # SGLang triton decode attention (MLA and MHA)
    "_fwd_kernel_stage2": "attention",
    "void rotary_embedding_kernel<c10::BFloat16, true>": "rope",
    "void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, unsigned int, 2, 2, "
    "-2>": "embedding",
    "_per_token_group_quant_fp8": "quantization",
    "void vllm::rms_norm_kernel<c10::BFloat16>": "normalization",
    "nvjet_sm90_tst_64x8_64x16_1x2_h_bz_NNT": "gemm",
    "Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x1": "gemm",
    "void deep_gemm::fp8_gemm_kernel<...>": "gemm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(...)>": "activation",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(...)>": "elementwise",
    "some_brand_new_kernel": DEFAULT_CATEGORY,
}

# Names from public traces that the rules once misfiled (issue 23): each with the category it belongs to.
FIELD_CASES = {
    # PyTorch's broadcast elementwise launcher (a diffusion trace): not a collective
    "void at::native::type_specialized_broadcast_kernel_launcher<0>::apply<at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >": "elementwise",
    "void at::native::(anonymous namespace)::type_specialized_broadcast_kernel<at::native::(anonymous namespace)::"
    "MulFunctor<float>, std::array<char*, 3ul> >": "elementwise",
    # NCCL's own broadcast stays communication
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)": "communication",
    # DeepEP expert-parallel dispatch / combine (a DeepSeek-V3 training trace): all-to-all communication
    "void dpsk::ep::internode::dispatch<false, 8, 4, 16, 32, 8>(int4*, float*, int*, long*, float*)": "communication",
    "void dpsk::ep::internode::combine<__nv_bfloat16, 8, 4, 16, 32>(int4*, float*, int const*)": "communication",
    "void dpsk::ep::internode::notify_dispatch<8, 4>(int const*, int*, int)": "communication",
    "void dpsk::ep::internode::cached_notify<8>(int, int, int)": "communication",
    "void dpsk::ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)": "communication",
    "void dpsk::ep::internode_ll::dispatch<false, 3, 7168>(void*, float*, int*, long*)": "communication",
    "void deep_ep::internode_ll::combine<8, 7168, 9>(void*, void*, int*)": "communication",
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*, float*, int*)": "communication",
    # the largest 'other' kernels of the field corpus (A100 ResNet training, MI300X/MI210, SGLang)
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, "
    "cudnnTensorStruct, float const*, cudnnTensorStruct, float const*)": "normalization",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*)":
        "normalization",
    "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnn::bn_fw_tr_1C11_args<float>)":
        "normalization",
    "void at::native::(anonymous namespace)::cuComputePartGradGammaBeta<float, float, true>(float const*)":
        "normalization",
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>("
    "cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)": "elementwise",
    "batched_transpose_256x4_half": "elementwise",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>("
    "at::cuda::detail::TensorInfo<float, unsigned int>)": "elementwise",
    "void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float>(float const*, long const*, int)":
        "pooling",
    "void at::native::(anonymous namespace)::adaptive_average_pool<float>(float const*, float*, int, int)": "pooling",
    "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)":
        "attention",
}


def test_shared_categories_cover_nvidia_and_amd_names():
    rules = load_categories()
    got = {name: rules.classify(name) for name in CASES}
    assert got == CASES
    assert rules.categories[-1] == DEFAULT_CATEGORY and len(rules.sha256) == 64


@pytest.mark.parametrize("name", list(FIELD_CASES))
def test_field_kernel_names_land_in_their_category(name):
    assert load_categories().classify(name) == FIELD_CASES[name]


def test_first_match_wins_and_case_is_ignored():
    rules = parse_categories("category,pattern\n# comment\nfirst,GEMM\n\nsecond,gemm|x\n")
    assert rules.classify("my_gemm_kernel") == "first" and rules.classify("x") == "second"


@pytest.mark.parametrize("text,words", [
    ("", "empty"),
    ("name,regex\na,b\n", "line 1: not a header naming"),
    ("category,pattern\nattention,flash(\n", "line 2, column 16: bad regex: missing ), unterminated subpattern"),
    ("category,pattern\n# a comment\nattention,\n", "line 3: empty pattern"),
    ("category,pattern\n", "no category rules"),
])
def test_malformed_categories_are_typed_errors(tmp_path, text, words):
    p = tmp_path / "cats.csv"
    p.write_text(text)
    with pytest.raises(CategoriesError) as ei:
        load_categories(p)
    assert words in str(ei.value) and str(p) in str(ei.value)


def test_missing_file_directory_and_edits_are_seen(tmp_path):
    with pytest.raises(FileMissingError):
        load_categories(tmp_path / "nope.csv")
    with pytest.raises(FileMissingError, match="directory"):
        load_categories(tmp_path)
    p = tmp_path / "cats.csv"
    p.write_text("category,pattern\nalpha,foo\n")
    assert load_categories(p).classify("foo_kernel") == "alpha"
    p.write_text("category,pattern\nbeta,foo\n# edited by the user\n")
    assert load_categories(p).classify("foo_kernel") == "beta"  # a changed file is re-read


def test_blocks_table_uses_the_same_parser(tmp_path):
    blocks = load_blocks()
    assert blocks.match("LlamaForCausalLM/LlamaModel/LlamaDecoderLayer/LlamaAttention/Linear@post", "Linear")[0] \
        == "attn_o_proj"
    p = tmp_path / "blocks.csv"
    p.write_text("pattern,block\nAttention,attn\n")
    assert load_blocks(p).match("X/MyAttention", "MyAttention") == ("attn", "")
    p.write_text("block,role\nattn,core\n")
    with pytest.raises(CategoriesError, match="'pattern'"):
        load_blocks(p)
