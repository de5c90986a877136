//go:build cuda

package cuda

import (
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
)

// switches are the backend's A/B measurement knobs. They are read from the
// environment once, here and nowhere else, because they exist for
// benchmarking on a GPU host (pocket-worker conformance/bench runs with
// and without them), not as configuration a user sets.
//
//	POCKET_CUBLASLT=0    prefill GEMMs use the built-in tf32 kernel, not cuBLASLt
//	POCKET_ATTN_OCC=2    the 2-blocks-per-SM prefill attention variant
//	POCKET_ATTN_PREFILL=regs|q4 prefill attention with the query in registers, or in shared memory at 4 blocks per SM (default: in shared memory, 3 blocks per SM)
//	POCKET_QGEMV=exact   GGUF one-row GEMVs keep float32 activations (no int8 dp4a path)
//	POCKET_QGEMV=v1      GGUF one-row GEMVs on the first int8 kernels (qgemv8_*, a quantize
//	                     launch per GEMV, no fused ops for block formats), not qmv
//	POCKET_QMV_GEOM=G[,kind=G...] qmv's geometry (rows a warp and blocks an SM: 4x3|2x4, quant_mmv_plan.go's
//	                     qmvGeoms; default the first), for all launches and then per kind (norm, o, down,
//	                     swiglu, plain), e.g. 4x3,down=2x4
//	POCKET_QMV_WPR=1|2|4|8 every qmv launch with that many steps splits a row group over that many warps
//	POCKET_FUSED=0       no fused decode kernels (kernels.FusedOps declines every call);
//	                     POCKET_FUSED=qkv,mlp,add,rope,attn enables only the named ones
//	                     (NormMatMul, NormSwiGLU, MatMulAdd, RoPEStoreKV, RoPEAttention)
//	POCKET_PDL=0         fused decode kernels and the P2P all-reduce launch without programmatic dependent launch
//	POCKET_P2P=0         tensor-parallel all-reduces through NCCL, not the peer-memory kernels (p2p.go)
//	POCKET_P2P_LL=0      the small all-reduces on the flag kernel, not the low-latency one (p2p_allreduce_ll)
//	POCKET_P2P_EARLY=1   the low-latency all-reduce lets the next GEMV launch before its own wait
//	                     (p2p_allreduce_ll_e)
//	POCKET_ATTN=partial  decode attention always on attn_partial (per query head), never attn_gqa
//	POCKET_GEMV_BLOCKS=N grouped GEMVs aim at N blocks per SM (default 2) when choosing warps per group
//	POCKET_PREFILL_SPLITS=0 prefill attention never splits the context (see Attention)
//	POCKET_LT_TUNE=1     prefill GEMM plans time cuBLASLt's candidate algorithms and keep the fastest
//	POCKET_FP8_MMA=0     one-row FP8 GEMVs on the grouped CUDA-core kernels (decode.cu), not the tensor-core
//	                     ones (fp8mma.cu); =1|2|4|8 keeps them and forces that many warps per row tile
//	POCKET_FP8_PREFILL=bf16 FP8 prefill GEMMs on dequantized bf16 chunks and cuBLASLt, not cuBLASLt's FP8 GEMM
//	                     with block scales (fp8LtGEMM: activations rounded to E4M3 per 128 columns; shapes it
//	                     does not take, and cuBLASLt before 12.9 or off Hopper, use the chunks anyway)
//	POCKET_FP8_LT_ROWS=N the least rows an FP8 GEMM takes cuBLASLt's FP8 GEMM with (default 9: every GEMM
//	                     past the one-row GEMVs' 8; MoE expert groups gain most, see fp8prefill.go)
//	POCKET_FP8_PREFILL=tf32 FP8 prefill GEMMs on the built-in tf32 kernel, not dequantized chunks on cuBLASLt
//	POCKET_FP8_PREFILL=mma  FP8 prefill GEMMs on the weight's E4M3 bytes (fp8gemm.cu: activations rounded to E4M3
//	                     per 128 columns, mma.sync on the f16 tensor cores; slower than the chunks on an H200)
//	POCKET_ATTN_PREFILL_256=0 prefill attention over head dim 256 (Qwen3.5, Qwen3-Next) on split-K flash-decoding
//	                     (attn_gqa / attn_partial, CUDA cores) instead of the flash kernel attn_prefill_256
//	POCKET_MLA_DECODE=576 DeepSeek's 576/512 latent attention (decode, short appends, DSA past index_topk) on
//	                     the CUDA cores with the dims fixed at compile time (mla_partial_576, four heads a warp),
//	                     not on the bf16 tensor cores (mla_tc); =generic on the any-shape kernel (mla_partial)
//	POCKET_MLA_DSA_EXPAND=0 DeepSeek-V3.2's prompts past index_topk keep the absorbed form (the latent attention
//	                     over the selected positions), not the expanded form masked to each row's DSA selection
//	                     (DSAMask, attn_prefill_mla_*m; 2.9× faster at 8192 tokens)
//	POCKET_DSA_TC=0      DeepSeek-V3.2's indexer scores prompt passes a warp a position on the CUDA cores
//	                     (dsa_scores), not on the tensor cores in three tf32 products (dsa_scores_tc)
//	POCKET_MLA_TC_WAVES=N mla_tc's splits of the context aim at N waves of one block an SM (1; 1–4)
//	POCKET_MLA_EXPAND=0  DeepSeek's latent attention keeps the absorbed form (mla.cu, CUDA cores) for prompt
//	                     passes too, not the expanded keys and values on the flash kernel (mla_prefill.go)
//	POCKET_ATTN_DEC_BLOCKS=N the fused decode attention (attn_decode) aims at N blocks per SM (2), fewer where fewer fit
//	POCKET_ATTN_DEC_OCC=0 ... without checking how many fit (its splits for 6-warp blocks then ran in two waves)
//	POCKET_ATTN_DEFER=0  the fused decode attention always merges its splits itself, never leaving the merge to
//	                     a block-format o projection's int8 rounding (attn_merge.go)
//	POCKET_ATTN_ROUND=0  a decode attention of head dim 128 whose output a block-format o projection reads
//	                     leaves its merge and rounding to a qx_merge launch, instead of doing both in its
//	                     last split (attn_decode_q_4; attn_merge.go)
//	POCKET_ATTN_DEC_FROM=N   contexts from N positions decode on rope_store + attn_gqa instead (default: none)
//	POCKET_ATTN_BLOCKS=N, POCKET_ATTN_CHUNK=N decode attn_partial aims at N blocks per SM (16) with
//	                     at least N positions per split (8)
//	POCKET_DELTA_LEAN=0  the token-by-token delta rule loads a token's value and gates after its q and k and
//	                     works the gates out in double by thread 0 (gated_delta_rule), not as
//	                     gated_delta_rule_l does (with q and k; in float, by a thread with no q/k of its own)
//	POCKET_HYBRID_LEAN=0 the DeltaNet convolution's SiLU, the gated norm and the attention gate's sigmoid in
//	                     double (and the gated norm loading z after its sum), not in float
//	POCKET_DELTA_SIDE=0  a decode graph's one-token delta rule updates its state in place, not on a side branch
//	                     of the graph during the next DeltaNet layer's mix (delta_side.go)
//	POCKET_DELTA_CHUNK=0 Gated DeltaNet prefill passes run the token-by-token recurrence, not the chunked
//	                     delta rule (hybrid_chunk.cu) that passes of more than 16 rows take by default
//	POCKET_DELTA_CHUNK_FROM=N the chunked delta rule takes passes of more than N rows (16), the token-by-token
//	                     recurrence the others
//	POCKET_FP8_PIPE=0    one-row FP8 GEMVs on fp8mma's kernels (two units in flight in registers), not the
//	                     ones that stream whole lines through a per-warp cp.async ring (fp8pipe.cuh)
//	POCKET_FP8_TILES=0   PrepareDecode makes no tiled copies of the FP8 matrices: the ring kernels read the
//	                     stored rows (fp8tiles.go)
//	POCKET_MOE_ROUTE=block MoE routing on the block-per-row kernel, not a warp per row (moe_route_w*)
//	POCKET_MOE_PIPE=0    one-row FP8 expert products on moe.cu's kernels, not the ring kernels (fp8pipe_moe.cuh)
//	POCKET_FP8_PIPE_KB=N caps a block's shared memory for the ring kernels at N KiB
//	POCKET_FP8_PIPE_PLAN=depth the ring kernels' geometry maximises units in flight, not warps (planPipe)
//	POCKET_HYBRID_PDL=0  the Gated DeltaNet kernels (conv1d, token-by-token delta rule, gated norm) and the
//	                     attention gate (sigmoid_mul) launch without programmatic dependent launch (with it,
//	                     the default, they read their state before the wait: Qwen3.5-27B FP8 decode 122.8
//	                     against 120.4 tok/s on an H200; the gate on it too, 124.0-124.2 against 123.4)
//	POCKET_ABLATE=a,b    leaves out the decode launches so tagged (qx, qx_norm, qmv_norm, qmv_o, qmv_down,
//	                     qmv_plain, qmv_swiglu, attn, allreduce, hybrid: the DeltaNet kernels and the
//	                     attention gate, delta_state_update, f8pipe_r|add|norm|swiglu|moe_swiglu|moe_down, moe_route, or a decode.cu or fp8mma.cu kernel's
//	                     name; feed_upload: fed replays without the arena's upload between them): wrong results, for timing only —
//	                     what a step costs without them (bench)
//	POCKET_QMV_SWIQ=0    a block-format SwiGLU GEMV leaves its output's int8 rounding to a qx launch before
//	                     the down projection, instead of rounding it itself (qmv_swiglu_q, 32 outputs a block)
//	POCKET_QMV_ADDQ=0    a block-format MatMulAdd followed by a NormMatMul/NormSwiGLU of its output leaves
//	                     that op's int8 rounding to a qx_norm launch, instead of rounding it itself (qmv_add_q)
//	POCKET_QMV_PRE2=0    a rounding Q4_K add GEMV of two steps a warp (qmv_add_q; the o projection of a
//	                     4096-wide model) loads one step before its PDL wait, not both (qmv_add_q2_4)
//	POCKET_QMV_FLAT=0    a Q4_K rounding SwiGLU GEMV ends each pass at block barriers (qmv_swiglu_q), not
//	                     with a warp's passes back to back and one barrier at the end (qmv_swiglu_qf)
//	POCKET_QMV_W6=0      block-format GEMVs always run in blocks of 8 warps, not 6 (3 a row group) where
//	                     those cost less (qmvBlockFor: Qwen3-8B's down projection)
//	POCKET_REGROUP=0     Q4_K, Q6_K and Q8_0 matrices are held as stored, not regrouped at load into aligned
//	                     groups (Q4_KG, Q6_KG, Q8_0G: regroup.go); =q4_k,q6_k (a list) regroups those formats alone
//	POCKET_FP8_PIPE_GEOM=op:in=WxTxS[,...] the ring kernel of op (r, add, norm, swiglu) over in columns takes
//	                     W warps a tile, T tiles a block and S ring stages, not planPipe's choice (measurement)
//	POCKET_MOE_QUANT=0   GGUF (block-format) MoE experts stay on host routing, not the device's indexed
//	                     expert GEMVs (moe_quant.cu)
//	POCKET_DRAW_GRID=0   sampled steps' draws run in one block (sample_draw), not over a block an SM
//	                     (sample_draw_grid, vocabularies of drawGridFrom ids or more); =N (2-160) every
//	                     draw over N blocks whatever the vocabulary and SM count (a grid too large to be
//	                     resident at once is refused and the one block takes over)
var switches = struct {
	noCublasLt      bool
	attnOcc2        bool
	exactQGEMV      bool
	qgemvV1         bool
	qmvGeom         string
	qmvWarps        int
	fused           map[string]bool
	noPDL           bool
	oldAttn         bool
	gemvBlocks      int
	noPrefillSplits bool
	ltTune          bool
	attnPrefill     string
	attnBlocks      int
	attnChunk       int
	attnDecBlocks   int
	attnDefer       bool
	attnRound       bool
	deltaLean       bool
	hybridLean      bool
	attnDecFrom     int
	attnDecNoOcc    bool
	fp8MMA          int
	noFP8Prefill    bool
	fp8PrefillMMA   bool
	fp8PrefillLt    bool
	fp8LtRows       int
	noPrefill256    bool
	noMLAExpand     bool
	mlaDecode       string
	mlaTCWaves      int
	mlaDSAExpand    bool
	dsaTC           bool
	noDeltaChunk    bool
	deltaChunkFrom  int
	deltaSide       bool
	noMoEQuant      bool
	noFP8Pipe       bool
	noFP8Tiles      bool
	noMoEPipe       bool
	moeRouteBlock   bool
	fp8PipeDeep     bool
	p2pOff          bool
	p2pNoLL         bool
	p2pEarly        bool
	hybridPDL       bool
	fp8PipeKB       int
	qmvSwiQ         bool
	qmvAddQ         bool
	qmvPre2         bool
	qmvFlat         bool
	noQmvW6         bool
	noRegroup       map[kernels.DType]bool
	ablate          map[string]bool
	pipeGeom        map[string]pipeGeom
	drawGrid        int // -1: a block an SM
}{
	noCublasLt:      os.Getenv("POCKET_CUBLASLT") == "0",
	attnOcc2:        os.Getenv("POCKET_ATTN_OCC") == "2",
	exactQGEMV:      os.Getenv("POCKET_QGEMV") == "exact",
	qgemvV1:         os.Getenv("POCKET_QGEMV") == "v1",
	qmvGeom:         os.Getenv("POCKET_QMV_GEOM"),
	qmvWarps:        intSwitch("POCKET_QMV_WPR", 0, 1, 8),
	fused:           fusedSwitch(os.Getenv("POCKET_FUSED")),
	noPDL:           os.Getenv("POCKET_PDL") == "0",
	oldAttn:         os.Getenv("POCKET_ATTN") == "partial",
	gemvBlocks:      intSwitch("POCKET_GEMV_BLOCKS", 2, 1, 64),
	noPrefillSplits: os.Getenv("POCKET_PREFILL_SPLITS") == "0",
	ltTune:          os.Getenv("POCKET_LT_TUNE") == "1",
	attnPrefill:     os.Getenv("POCKET_ATTN_PREFILL"),
	attnBlocks:      intSwitch("POCKET_ATTN_BLOCKS", 16, 1, 64),
	attnChunk:       intSwitch("POCKET_ATTN_CHUNK", 8, 1, 4096),
	attnDecBlocks:   intSwitch("POCKET_ATTN_DEC_BLOCKS", 2, 1, 64),
	attnDefer:       os.Getenv("POCKET_ATTN_DEFER") != "0",
	attnRound:       os.Getenv("POCKET_ATTN_ROUND") != "0",
	deltaLean:       os.Getenv("POCKET_DELTA_LEAN") != "0",
	hybridLean:      os.Getenv("POCKET_HYBRID_LEAN") != "0",
	attnDecFrom:     intSwitch("POCKET_ATTN_DEC_FROM", math.MaxInt, 1, math.MaxInt),
	attnDecNoOcc:    os.Getenv("POCKET_ATTN_DEC_OCC") == "0",
	noFP8Prefill:    os.Getenv("POCKET_FP8_PREFILL") == "tf32",
	fp8PrefillMMA:   os.Getenv("POCKET_FP8_PREFILL") == "mma",
	fp8PrefillLt:    os.Getenv("POCKET_FP8_PREFILL") == "",
	fp8LtRows:       intSwitch("POCKET_FP8_LT_ROWS", 9, 9, math.MaxInt),
	noPrefill256:    os.Getenv("POCKET_ATTN_PREFILL_256") == "0",
	noMLAExpand:     os.Getenv("POCKET_MLA_EXPAND") == "0",
	mlaDecode:       os.Getenv("POCKET_MLA_DECODE"), // "" or tc, 576, generic
	mlaTCWaves:      intSwitch("POCKET_MLA_TC_WAVES", 1, 1, 4),
	mlaDSAExpand:    os.Getenv("POCKET_MLA_DSA_EXPAND") != "0",
	dsaTC:           os.Getenv("POCKET_DSA_TC") != "0",
	fp8MMA:          intSwitch("POCKET_FP8_MMA", -1, 0, 8),
	noDeltaChunk:    os.Getenv("POCKET_DELTA_CHUNK") == "0",
	deltaChunkFrom:  intSwitch("POCKET_DELTA_CHUNK_FROM", deltaChunkFrom, 1, math.MaxInt),
	deltaSide:       os.Getenv("POCKET_DELTA_SIDE") != "0",
	noMoEQuant:      os.Getenv("POCKET_MOE_QUANT") == "0",
	drawGrid:        intSwitch("POCKET_DRAW_GRID", -1, 0, drawGridMaxBlocks),
	noFP8Pipe:       os.Getenv("POCKET_FP8_PIPE") == "0",
	noFP8Tiles:      os.Getenv("POCKET_FP8_TILES") == "0",
	noMoEPipe:       os.Getenv("POCKET_MOE_PIPE") == "0",
	moeRouteBlock:   os.Getenv("POCKET_MOE_ROUTE") == "block",
	fp8PipeDeep:     os.Getenv("POCKET_FP8_PIPE_PLAN") == "depth",
	p2pOff:          os.Getenv("POCKET_P2P") == "0",
	p2pNoLL:         os.Getenv("POCKET_P2P_LL") == "0",
	p2pEarly:        os.Getenv("POCKET_P2P_EARLY") == "1",
	hybridPDL:       os.Getenv("POCKET_HYBRID_PDL") != "0",
	fp8PipeKB:       intSwitch("POCKET_FP8_PIPE_KB", 0, 16, 227),
	qmvSwiQ:         os.Getenv("POCKET_QMV_SWIQ") != "0",
	qmvAddQ:         os.Getenv("POCKET_QMV_ADDQ") != "0",
	qmvPre2:         os.Getenv("POCKET_QMV_PRE2") != "0",
	qmvFlat:         os.Getenv("POCKET_QMV_FLAT") != "0",
	noQmvW6:         os.Getenv("POCKET_QMV_W6") == "0",
	noRegroup:       regroupSwitch(os.Getenv("POCKET_REGROUP")),
	ablate:          listSwitch(os.Getenv("POCKET_ABLATE")),
	pipeGeom:        pipeGeomSwitch(os.Getenv("POCKET_FP8_PIPE_GEOM")),
}

// pipeGeomSwitch reads POCKET_FP8_PIPE_GEOM: "op:in=WxTxS" entries,
// comma-separated; what it cannot read it leaves out (nil when empty).
func pipeGeomSwitch(v string) map[string]pipeGeom {
	if v == "" {
		return nil
	}
	out := map[string]pipeGeom{}
	for _, e := range strings.Split(v, ",") {
		key, geom, ok := strings.Cut(strings.TrimSpace(e), "=")
		p := strings.Split(geom, "x")
		if !ok || len(p) != 3 {
			continue
		}
		w, e1 := strconv.Atoi(p[0])
		t, e2 := strconv.Atoi(p[1])
		s, e3 := strconv.Atoi(p[2])
		if e1 == nil && e2 == nil && e3 == nil {
			out[key] = pipeGeom{wpr: w, tiles: t, stages: s}
		}
	}
	return out
}

// ablated reports whether POCKET_ABLATE leaves out the launches tagged
// tag. Measuring a step without a kernel prices it where nothing else
// can: inside a captured graph, with its overlap with the neighbours (ncu
// serialises kernels; the GPU machines cannot make nsys reports).
func ablated(tag string) bool { return len(switches.ablate) > 0 && switches.ablate[tag] }

// ablatedAs is ablated(prefix + name), the tag built only when
// POCKET_ABLATE is set (these run on every launch of a decode step).
func ablatedAs(prefix, name string) bool {
	return len(switches.ablate) > 0 && switches.ablate[prefix+name]
}

// listSwitch is a comma-separated set (nil when empty).
func listSwitch(v string) map[string]bool {
	if v == "" {
		return nil
	}
	on := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		on[strings.TrimSpace(f)] = true
	}
	return on
}

func fusedSwitch(v string) map[string]bool {
	on := map[string]bool{}
	switch v {
	case "", "1":
		v = "qkv,mlp,add,rope,attn"
	case "0":
		v = ""
	}
	for _, f := range strings.Split(v, ",") {
		on[f] = true
	}
	return on
}

// intSwitch is an integer switch in [lo, hi], def when unset or invalid.
func intSwitch(name string, def, lo, hi int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil || v < lo || v > hi {
		return def
	}
	return v
}
