// Package cuda is the NVIDIA GPU Backend (build tag `cuda`): weights are
// uploaded once in their stored format (bf16, f16, f32, FP8 E4M3 with
// block scales, GGUF blocks — never a widened copy), activations and the
// paged KV pool are float32 in device memory. Kernels are CUDA C compiled
// to compute_90 PTX (each .cu has its `go generate` line, which gzips
// nvcc's output: the tree keeps X.ptx.gz, and X.ptx is ignored) and
// embedded, one module per concern, the optional ones loaded on first use:
//
//	kernels.cu  the Backend's ops: GEMV/GEMM, norms, RoPE, and attention
//	            (kv_attn.cuh: the KV store and split-K decode attention,
//	            attn_partial and attn_gqa; prefill_attn.cuh: flash attention
//	            on the bf16 tensor cores; mla_prefill.cuh: the same kernel
//	            over DeepSeek's expanded latent attention, mla_prefill.go)
//	decode.cu   kernels.FusedOps: the one-token step's grouped GEMVs (four
//	            weight rows per warp, bf16/FP8) with the RMSNorm, SwiGLU
//	            and residual add folded in (and gemv_heads: MLA's per-head
//	            products in one launch), q/k norm + RoPE + KV store, and
//	            (decode_attn.cuh) the whole one-token attention with its
//	            norms, RoPE and KV store; they use programmatic dependent
//	            launch to stream their weights (and cached K/V) while the
//	            previous kernel drains
//	quant.cu    GGUF block formats (quant.go)
//	moe.cu      kernels.MoEOps: routing and indexed experts on the device
//	            (moe_quant.cu: the indexed experts in GGUF block formats)
//	hybrid.cu   kernels.HybridOps: Gated DeltaNet (decode and short passes
//	            token by token; hybrid_chunk.cu: longer prefills in chunks
//	            of 64 tokens, the WY/UT form)
//	mla.cu      kernels.MLAOps: latent attention (mla_tc.cuh: DeepSeek's dims on
//	            the tensor cores) and DeepSeek sparse attention's selection
//	            (dsa.cuh)
//	p2p.cu      the one-shot NVLink all-reduce of tensor-parallel groups
//
// Headers: common.cuh (element decoders, warp sums), tc.cuh (the tensor-core
// and cp.async helpers the prefill attention, the FP8 GEMMs and the MLA
// kernels share), f16mma.cuh (the FP8 kernels' f16 fragments).
//
// Prefill GEMMs go to cuBLASLt (loaded with dlopen; cublaslt.go) when the
// host has it, with the activations rounded to bf16 on the device
// (kernels.PreciseMatMul keeps them at tf32 where a model needs it). NCCL
// is loaded with dlopen too (nccl.go). A decode step is recorded once and
// replayed as a CUDA graph (graph.go). The A/B switches for measurement
// are read in one place, switches.go. It links gorgonia.org/cu, whose init
// exits on a host without a driver, so only the GPU rank binary
// (cmd/pocket-worker) imports it; without the tag this package is empty.
//
// Threading: a CUDA context is current per OS thread. Every Backend method
// takes the backend's mutex, pins the calling goroutine to its OS thread
// for the duration of the call and makes the context current there, so one
// caller at a time drives the GPU from whatever goroutine it runs on. We
// chose this over marshalling each op to a dedicated goroutine because a
// hand-off costs a thread wake-up (several µs) per op, more than most
// decode kernels run; with the lock, an op is one cgo call. A decode step is
// replayed as one CUDA graph (Graph) anyway, so the launch path matters
// only for prefill and for eager steps.
package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o kernels.ptx kernels.cu && gzip -n9f kernels.ptx"
