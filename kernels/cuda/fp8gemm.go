//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o fp8gemm.ptx fp8gemm.cu && gzip -n9f fp8gemm.ptx"

import (
	_ "embed"

	"gorgonia.org/cu"
)

// FP8 prefill GEMMs on the tensor cores with E4M3 operands (fp8gemm.cu):
// the activation is rounded to E4M3 per (row, 128 columns) into a scratch,
// then multiplied by the weight as stored, block scales applied every 128
// columns. Off by default (POCKET_FP8_PREFILL=mma, SetFP8Prefill); the
// module is loaded on the first GEMM that takes it, so the default path
// never JITs its PTX.

//go:embed fp8gemm.ptx.gz
var fp8gemmPTX []byte

// Shapes of fp8gemm.cu: fp8Group columns per activation scale (and per
// stage), fp8Tile rows and columns per block tile, fp8GemmShm bytes of
// dynamic shared memory (SMEM_BYTES: 4 stages of two E4M3 tiles and their
// scales, 132 KiB).
const (
	fp8Group   = 128
	fp8Tile    = 128
	fp8GemmShm = 4 * (2*fp8Tile*fp8Group + 2*fp8Tile*4)
)

type f8gemmMod struct {
	on     bool // take the path (switch or SetFP8Prefill)
	loaded bool

	lt bool // cuBLASLt's FP8 GEMM (fp8LtGEMM; switch or SetFP8Prefill)

	quant cFunc // fp8_quant
	widen cFunc // bf16_widen
	tile  cFunc // fp8_gemm_t: one weight scale row per block tile
	col   cFunc // fp8_gemm_c: a weight scale per column

	// Scratch of the quantized activation (rows·in bytes) and its scales
	// (rows·in/128 floats), and of fp8LtGEMM's padded or bf16 output,
	// through b.scratch.
	q, y   cu.DevicePtr
	qN, yN int64
}

// f8gemmState is the module's state, made on first use without loading
// anything (b.mu held).
func (b *Backend) f8gemmState() *f8gemmMod {
	if b.f8g == nil {
		b.f8g = &f8gemmMod{on: switches.fp8PrefillMMA, lt: switches.fp8PrefillLt}
	}
	return b.f8g
}

// SetFP8Prefill turns the E4M3 prefill GEMMs on or off: mma (fp8MMAGEMM;
// default off, POCKET_FP8_PREFILL=mma on) and lt (fp8LtGEMM; default on,
// POCKET_FP8_PREFILL=bf16 off), so that conformance can check each path
// and the bf16 chunks; it returns the previous settings.
func (b *Backend) SetFP8Prefill(mma, lt bool) (wasMMA, wasLt bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.f8gemmState()
	wasMMA, wasLt = m.on, m.lt
	m.on, m.lt = mma, lt
	return wasMMA, wasLt
}

// f8gemmModule loads the kernels once (context current). It fails on a
// GPU without sm_89's FP8 conversions or the shared memory the GEMM asks
// for; the path is switched on only by request, so that is an error, not
// a quiet fallback.
func (b *Backend) f8gemmModule(m *f8gemmMod) error {
	if m.loaded {
		return nil
	}
	_, err := loadModule(fp8gemmPTX, "fp8gemm", map[string]*cFunc{"fp8_quant": &m.quant, "bf16_widen": &m.widen,
		"fp8_gemm_t": &m.tile, "fp8_gemm_c": &m.col})
	if err == nil {
		err = setMaxShm(m.tile, fp8GemmShm)
	}
	if err == nil {
		err = setMaxShm(m.col, fp8GemmShm)
	}
	m.loaded = err == nil
	return err
}

// fp8MMAGEMM computes y[rows×out] = x·wᵀ (y overwritten) for an FP8
// block-scaled weight on fp8gemm.cu's kernels, or returns false (nothing
// done) when the path is off or the shape is not one they take: in and
// the scale blocks' width b1 multiples of 128, x 16-byte aligned. Called
// with the backend entered, deferred GEMVs flushed.
func (b *Backend) fp8MMAGEMM(y, x cu.DevicePtr, t *tensor, rows int) bool {
	m := b.f8gemmState()
	out, in := t.w.Rows(), t.w.Cols()
	b0, b1 := t.w.ScaleBlock[0], t.w.ScaleBlock[1]
	if !m.on || rows <= 0 || out <= 0 || in <= 0 || in%fp8Group != 0 || b0 <= 0 || b1 <= 0 || b1%fp8Group != 0 ||
		t.nsc != cdiv(in, b1) || x%16 != 0 || t.data%16 != 0 || cdiv(rows, fp8Tile) > 65535 {
		return false
	}
	if err := b.f8gemmModule(m); err != nil {
		b.fail(err)
		return true
	}
	qBytes := (int64(rows)*int64(in) + 255) &^ 255
	q := b.scratch(&m.q, &m.qN, qBytes+int64(rows)*int64(in/fp8Group)*4)
	sa := q + cu.DevicePtr(qBytes)
	groups := rows * (in / fp8Group)
	b.launchFn(m.quant, cdiv(groups, 8), 1, 256, ptr(q), ptr(sa), ptr(x), i32(rows), i32(in), i32(0))
	if b.err != nil {
		return true // b.err reports it (the allocation or the launch)
	}
	f := m.col
	if b0%fp8Tile == 0 {
		f = m.tile
	}
	b.launchFnShm(f, cdiv(out, fp8Tile), cdiv(rows, fp8Tile), 256, fp8GemmShm, ptr(y), ptr(q), ptr(sa), ptr(t.data),
		ptr(t.scale), i32(rows), i32(out), i32(in), i32(b0), i32(b1), i32(t.nsc))
	return true
}

// fp8LtGEMM computes y[rows×out] = x·wᵀ (y overwritten) on cuBLASLt's FP8
// tensor-core GEMM with DeepSeek-style scales: the weight's E4M3 bytes and
// [128, 128] block scales as stored, the activation rounded to E4M3 per
// (row, 128 columns) by fp8_quant (the rounding fp8MMAGEMM uses). Hopper's
// FP8 rate is twice bf16's, and no bf16 copy of the weight is made (the
// chunked path moves ~5 bytes per weight element per GEMM). It returns
// false (nothing done) when the path is off, the shape is not one it takes
// (128×128 blocks, in a multiple of 512: cuBLASLt wants the scale rows
// padded to 4 blocks, which the checkpoint's are then), or cuBLASLt has no
// plan (ltPlanFP8). Called with the backend entered, deferred GEMVs
// flushed.
func (b *Backend) fp8LtGEMM(y, x cu.DevicePtr, t *tensor, rows int) bool {
	m := b.f8gemmState()
	out, in := t.w.Rows(), t.w.Cols()
	if !m.lt || !b.lt.ok || rows <= 0 || out <= 0 || out%4 != 0 || in%(4*fp8Group) != 0 ||
		t.w.ScaleBlock != [2]int{fp8Group, fp8Group} || t.nsc != in/fp8Group || x%16 != 0 || t.data%16 != 0 ||
		t.scale%16 != 0 {
		return false
	}
	if err := b.f8gemmModule(m); err != nil {
		m.lt = false // the bf16 chunks from now on; not an error on a path taken by default
		return false
	}
	// cuBLASLt declines FP8 row counts off a multiple of 8 (9 rows:
	// NOT_SUPPORTED, measured with cuBLASLt 13.0): such a GEMM runs on rp
	// rows, the extra ones zero (bytes and scales), into a scratch output
	// whose first rows are copied to y. So does a plan with bf16 output,
	// widened into y.
	rp := (rows + 7) &^ 7
	round := func(n int64) int64 { return (n + 255) &^ 255 }
	qBytes, sBytes := round(int64(rp)*int64(in)), round(int64(rp)*int64(in/fp8Group)*4)
	q := b.scratch(&m.q, &m.qN, qBytes+sBytes)
	if b.err != nil {
		return true // b.err reports the allocation
	}
	sx, yp := q+cu.DevicePtr(qBytes), y
	p := b.ltPlanFP8(rp, out, in, t.scale, sx)
	if p == nil {
		return false
	}
	if rp != rows || p.bf16 {
		yp = b.scratch(&m.y, &m.yN, int64(rp)*int64(out)*4)
		if b.err != nil {
			return true
		}
	}
	if rp != rows {
		b.fail(cu.MemsetD8Async(q+cu.DevicePtr(rows*in), 0, int64((rp-rows)*in), b.stream))
		b.fail(cu.MemsetD32Async(sx, 0, int64(rp*(in/fp8Group)), b.stream))
	}
	groups := rows * (in / fp8Group)
	b.launchFn(m.quant, cdiv(groups, 8), 1, 256, ptr(q), ptr(sx), ptr(x), i32(rows), i32(in), i32(rp))
	b.ltRunFP8(p, yp, q, sx, t.data, t.scale, rp, out, in)
	switch n := rows * out; {
	case p.bf16:
		b.launchFn(m.widen, cdiv(n, 256), 1, 256, ptr(y), ptr(yp), uint64(n))
	case rp != rows:
		b.fail(cu.MemcpyDtoDAsync(y, yp, int64(n*4), b.stream))
	}
	return true
}
