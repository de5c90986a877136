//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o moe_quant.ptx moe_quant.cu && gzip -n9f moe_quant.ptx"

import (
	_ "embed"
	"fmt"

	"github.com/pocketllm/pocketllm/kernels"
)

// The MoE decode path for GGUF block-format experts (kernels in
// moe_quant.cu): the indexed gate+up+SwiGLU and down GEMVs of moe.go, one
// pair per block format, decoding the blocks in registers and multiplying
// by the float32 activations (the exact path of quant.cu's GEMV, not the
// int8 one), so a MoE GGUF model decodes without a host round trip per
// layer and its step can be captured as a graph. Gate and up share one
// format per layer, down may have another. More rows than moeGEMVRows go
// through moeGrouped, whose MatMuls take quant.go's paths.
//
// The module is loaded with the first GGUF expert set, so bf16/FP8 MoE
// models never JIT it; POCKET_MOE_QUANT=0 (switches.go) leaves GGUF
// experts on host routing.
//
// Speed (H200, Qwen3-30B-A3B widths, one row, Q4_K gate/up and Q6_K down:
// 24.5 MB of the row's 8 experts): gate/up 27 µs + down 22 µs, ~500 GB/s,
// where the bf16 kernels stream at ~2.4 TB/s. A lane decodes a 32-element
// sub-block per step through sub32's unaligned word loads (a Q4_K
// sub-block: 14 loads for 18 bytes); wider loads per lane, as qmv does for
// the int8 path, are the next step if GGUF MoE decode needs it.

//go:embed moe_quant.ptx.gz
var moeQuantPTX []byte

// moeQuantFns are one format's kernels.
type moeQuantFns struct{ gateup, down cFunc }

// moeQuantModule loads the GGUF expert kernels once (context current) and
// fills its copies of the lattice codebooks.
func (b *Backend) moeQuantModule(m *moeMod) (map[kernels.DType]*moeQuantFns, error) {
	if m.quant != nil {
		return m.quant, nil
	}
	layouts := layoutNames()
	fns := make(map[kernels.DType]*moeQuantFns, len(layouts))
	names := map[string]*cFunc{}
	for dt, n := range layouts {
		f := &moeQuantFns{}
		fns[dt] = f
		names["moe_gateup_"+n], names["moe_down_"+n] = &f.gateup, &f.down
	}
	mod, err := loadModule(moeQuantPTX, "MoE GGUF", names)
	if err != nil {
		return nil, err
	}
	if err := uploadLattices(mod); err != nil {
		return nil, err
	}
	m.quant = fns
	return fns, nil
}

// moeQuantFormat returns why the GGUF kernels cannot run experts whose
// gate/up are in gu and down in dn ("": they can). Widths need no check:
// LoadWeight only takes rows of whole blocks, and every block is a
// multiple of 32 elements, the sub-block the kernels step by.
func moeQuantFormat(gu, dn kernels.DType) string {
	switch {
	case switches.noMoEQuant:
		return "GGUF experts (POCKET_MOE_QUANT=0)"
	case !isQuant(gu) || !isQuant(dn):
		return fmt.Sprintf("%s gate/up with %s down experts", gu, dn)
	}
	return ""
}

// moeQuantExperts launches the decode path's two GEMVs for a GGUF set:
// h [rows, K, inter] from x, then dst [rows, hidden] from h.
func (b *Backend) moeQuantExperts(s *expertSet, y, h, xp, sp uint64, rows int) {
	k, e, hid, inter := s.r.TopK, s.r.Experts, s.hidden, s.inter
	b.launchFn(s.q.gateup, cdiv(inter, 8), rows*k, 256, h, xp, sp, s.table(0), s.table(1), i32(inter), i32(hid), i32(k),
		i32(e), uint64(s.rbGU))
	b.launchFn(s.q.down, cdiv(hid, 8), rows, 256, y, h, sp, s.table(2), i32(hid), i32(inter), i32(k), i32(e),
		uint64(s.rbDown))
}

// MoEQuant reports whether NewExperts takes GGUF experts (not with
// POCKET_MOE_QUANT=0), so conformance knows whether to check them.
func MoEQuant() bool { return !switches.noMoEQuant }
