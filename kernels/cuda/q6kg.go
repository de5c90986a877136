package cuda

import (
	"github.com/pocketllm/pocketllm/kernels"
)

// Q6_KG is how the device holds a Q6_K matrix whose rows are whole groups
// of four blocks (columns % 1024 == 0): the same bytes, regrouped so that
// every load of the batch-1 GEMVs is aligned. Q6_K's 210-byte blocks are
// only 2-byte aligned, so qmv read a block's share of a lane as 13 32-bit
// loads and 8 funnel shifts; here it is five aligned loads of 8 and 2
// bytes. The format never leaves the backend: tensor.Weight() is still the
// Q6_K weight, and the CPU decodes the file's bytes.
//
// A group of 1024 elements (840 bytes, as four blocks) holds, for its
// blocks k = 0..3:
//
//	[192k, 192k+128)   block k's ql, in 16-byte lanes: lane t (n = t/4,
//	                   l = t%4) holds ql[64n+8l : +8] then ql[64n+32+8l : +8],
//	                   the two 8-byte runs qmv's lane t of the block reads
//	[192k+128, 192k+192) block k's qh as stored
//	[768+16k, 784+16k)  block k's 16 scales
//	[832+2k, 834+2k)    block k's d
//
// quant_blocks.cuh's Fmt<Q6_KG> and sub32 (every generic kernel: prefill
// dequantization, Embed, the fp32 GEMVs, the MoE experts) and
// quant_mmv.cuh's QT<Q6_KG> (qmv) read this layout.
const dtQ6KG kernels.DType = 64 // Q6_KG in quant_blocks.cuh; past every file format

const (
	q6kBlock      = 210 // bytes of a Q6_K block (256 elements)
	q6kgBlocks    = 4
	q6kgBytes     = q6kgBlocks * q6kBlock // 840
	q6kgElems     = q6kgBlocks * 256
	q6kgScalesOff = 768
	q6kgDOff      = 832
)

// q6kgTakes reports whether a weight of w's format and shape is held as
// Q6_KG: a Q6_K matrix of whole groups.
func q6kgTakes(w *kernels.Weight) bool {
	return w.DType == kernels.Q6_K && len(w.Shape) >= 2 && w.Cols()%q6kgElems == 0
}

// q6kgGroup regroups four Q6_K blocks src (840 bytes) into dst.
func q6kgGroup(dst, src []byte) {
	_ = dst[q6kgBytes-1]
	_ = src[q6kgBytes-1]
	for k := range q6kgBlocks {
		blk := src[k*q6kBlock : (k+1)*q6kBlock]
		q := dst[192*k : 192*k+192]
		for t := range 8 {
			n, l := t/4, t%4
			copy(q[16*t:16*t+8], blk[64*n+8*l:64*n+8*l+8])
			copy(q[16*t+8:16*t+16], blk[64*n+32+8*l:64*n+32+8*l+8])
		}
		copy(q[128:192], blk[128:192])
		copy(dst[q6kgScalesOff+16*k:q6kgScalesOff+16*k+16], blk[192:208])
		copy(dst[q6kgDOff+2*k:q6kgDOff+2*k+2], blk[208:210])
	}
}

// q6kgRegroup regroups src, whole Q6_K rows of whole groups, into dst
// (the same length).
func q6kgRegroup(dst, src []byte) {
	for o := 0; o+q6kgBytes <= len(src); o += q6kgBytes {
		q6kgGroup(dst[o:o+q6kgBytes], src[o:o+q6kgBytes])
	}
}
