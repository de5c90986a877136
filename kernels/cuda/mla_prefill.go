//go:build cuda

package cuda

import (
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// Prompt passes of DeepSeek's latent attention, expanded
// (kernels.MLAPrefillOps): the model expands the context's latents into
// per-head keys and values with one GEMM per head group, and
// attn_prefill_mla_* (mla_prefill.cuh) runs the flash kernel of the other
// architectures' prompts over them, reading queries, keys and values
// where the model leaves them. The absorbed kernels of mla.cu walk every
// (query, key, head) through a 576-wide dot and a 512-wide sum in fp32 on
// the CUDA cores; this is 192 and 128 on the tensor cores.

var _ kernels.MLAPrefillOps = (*Backend)(nil)

// ReadKV implements kernels.MLAPrefillOps.
func (b *Backend) ReadKV(dst kernels.Buf, kp kernels.KVPool, layer int, table []int32, n, lo, width int) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	p, ok := kp.(*kvPool)
	if !ok || p.spec.Half {
		b.fail(fmt.Errorf("cuda: ReadKV of a KV pool of another backend or of float16: %w", kernels.ErrUnsupported))
		return
	}
	if lo < 0 || width < 0 || lo+width > p.kw || n > len(table)*p.spec.BlockSize {
		b.fail(fmt.Errorf("cuda: ReadKV of columns [%d, %d) of %d-wide rows, %d positions of %d blocks",
			lo, lo+width, p.kw, n, len(table)))
		return
	}
	tp := b.put(kTable, words(table))
	b.run(fKVReadCols, n, 1, min(256, max(32, width)), ptr(dptr(dst)), ptr(p.kLayer(layer)), ptr(tp),
		i32(p.spec.BlockSize), i32(p.kw), i32(lo), i32(width))
}

// MLAExpandedAttention implements kernels.MLAPrefillOps for DeepSeek's
// head dims (128 + 64, 128) and the test fixtures' (16 + 8, 16); other
// shapes are declined, and every shape under POCKET_MLA_EXPAND=0. A DSA
// mask takes the masked kernels (attn_prefill_mla_*m).
func (b *Backend) MLAExpandedAttention(dst, q, qpe, kv, kpe kernels.Buf, a kernels.MLAExpanded) bool {
	f := -1
	switch {
	case a.Dn == 128 && a.Dr == 64 && a.Dv == 128:
		f = fAttnPrefillMLA192
	case a.Dn == 16 && a.Dr == 8 && a.Dv == 16:
		f = fAttnPrefillMLA24
	}
	if f < 0 || switches.noMLAExpand || a.Rows < 1 || a.HN < 1 || a.H0 < 0 || a.H0+a.HN > a.Heads {
		return false
	}
	words := kernels.MaskWords(a.Start + a.Rows)
	if a.Mask != nil {
		if a.Mask.Len() < a.Rows*words {
			return false
		}
		f += fAttnPrefillMLA192m - fAttnPrefillMLA192 // (the masked kernels follow the plain ones in order)
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	args := []uint64{ptr(dptr(dst)), ptr(dptr(q)), ptr(dptr(qpe)), ptr(dptr(kv)), ptr(dptr(kpe)), i32(a.Rows),
		i32(a.Start), i32(a.Heads), i32(a.H0), i32(a.HN), f32(a.Scale)}
	if a.Mask != nil {
		args = append(args, ptr(dptr(a.Mask)), i32(words))
	}
	b.run(f, cdiv(a.Rows, 64), a.HN, 128, args...)
	return true
}

// DSAMask implements kernels.MLAPrefillOps: dsaSelect's lists (the
// indexer's scores and top-k, as MLAttention takes them) made a bit mask by
// dsa_mask, for contexts up to 32768 positions. POCKET_MLA_DSA_EXPAND=0
// declines it, and DeepSeek-V3.2's long prompts stay absorbed.
func (b *Backend) DSAMask(mask kernels.Buf, d *kernels.DSA, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows int) bool {
	ctx := seq.Start + rows
	nw := kernels.MaskWords(ctx)
	if !switches.mlaDSAExpand || rows < 1 || nw > maxMaskWords || mask.Len() < rows*nw {
		return false
	}
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	m, err := b.mlaModule()
	if err != nil {
		b.fail(err)
		return true
	}
	p, ok := kp.(*kvPool)
	if !ok || p.spec.Half {
		b.fail(fmt.Errorf("cuda: latent attention over a KV pool of another backend or of float16: %w", kernels.ErrUnsupported))
		return true
	}
	tp := b.put(kTable, words(seq.Table))
	st := b.put(kStart, []uint32{uint32(seq.Start)})
	sel, cnt := b.dsaSelect(m, p, layer, tp, st, rows, ctx, d)
	if b.err != nil {
		return true
	}
	b.launchFn(m.mask, rows, 1, 256, ptr(dptr(mask)), ptr(sel), ptr(cnt), i32(d.TopK), i32(nw))
	return true
}

// MLAExpandSpeedup implements kernels.MLAPrefillOps: a conservative 8.
// Measured on an H200 (DeepSeek-V3 widths, docs/benchmarks.md, 2026-11-30
// from 16:27), the absorbed kernel does ~7 T multiply-adds a second;
// cuBLASLt's FP8 expansion and the flash kernel run tens of times that,
// less the expansion's round trip through memory (16 KiB a position a
// head group).
func (b *Backend) MLAExpandSpeedup() float64 { return 8 }

var _ kernels.HeadMatMul = (*Backend)(nil)

// HeadMatMulTakes implements kernels.HeadMatMul: what the grouped GEMVs
// of decode.cu read (groupedReads).
func (b *Backend) HeadMatMulTakes(w *kernels.Weight) bool { return groupedReads(w) }

// MatMulHeads implements kernels.HeadMatMul on gemv_heads (decode.cu): the
// grouped GEMV with each block's input and output offset by its head, one
// launch for all heads and rows.
func (b *Backend) MatMulHeads(dst, x kernels.Buf, w kernels.Tensor, a kernels.HeadProduct) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	t, _ := w.(*tensor)
	f, ok := formOf(a.In, w)
	if !ok || t.w.Rows() != a.Heads*a.Out || a.XRow%4 != 0 || a.XHead%4 != 0 {
		b.fail(fmt.Errorf("cuda: MatMulHeads of %d heads of [%d, %d] over a weight it does not take: %w",
			a.Heads, a.Out, a.In, kernels.ErrUnsupported))
		return
	}
	wpr := b.groupWarps(a.Heads*cdiv(a.Out, groupRows), f.chunks())
	perHead := cdiv(a.Out, groupRows*8/wpr)
	args := []uint64{ptr(dptr(dst)), ptr(dptr(x)), ptr(t.data), ptr(t.scale), i32(a.Out), i32(a.In), i32(wpr)}
	args = append(args, f.args()...)
	args = append(args, i32(a.Heads), uint64(a.XRow), uint64(a.XHead), uint64(a.DstRow), uint64(a.DstHead))
	b.runDec(f.variant(dGemvHeads), a.Heads*perHead, a.Rows, 256, args...)
}
