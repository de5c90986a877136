// Package cpu is the pure-Go Backend: float32 math over all cores, reading
// bf16, f16, FP8 E4M3 block-scaled and GGUF block weights directly from the
// memory-mapped checkpoint (no float32 copy of the weights is ever made).
// It is always built, it is the daemon's embedded default, and it is the
// reference every other backend is checked against.
package cpu

import (
	"math"
	"runtime"

	"github.com/pocketllm/pocketllm/internal/vmath"
	"github.com/pocketllm/pocketllm/kernels"
)

// Backend implements kernels.Backend on the host CPU.
type Backend struct {
	workers int
	pool    *pool
}

var _ kernels.Backend = (*Backend)(nil)

// New returns a backend that uses threads goroutines for parallel ops
// (0: GOMAXPROCS).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	b := &Backend{workers: threads}
	if threads > 1 {
		b.pool = newPool(threads)
	}
	return b
}

// Close ends the backend's worker goroutines; ops after it run on the
// calling goroutine alone. The daemon closes a model's backend when it
// unloads the model, so that a process that loads and drops models (tests,
// a program embedding the daemon) does not keep every old pool's
// goroutines parked.
func (b *Backend) Close() {
	if b.pool != nil {
		b.pool.close()
	}
}

// Name implements kernels.Backend.
func (b *Backend) Name() string { return "cpu" }

// Buf is a host float32 buffer.
type Buf struct{ D []float32 }

// Len implements kernels.Buf.
func (b *Buf) Len() int { return len(b.D) }

func f32(b kernels.Buf) []float32 { return b.(*Buf).D }

// NewBuf implements kernels.Backend.
func (b *Backend) NewBuf(n int) kernels.Buf { return &Buf{D: make([]float32, n)} }

// Write implements kernels.Backend.
func (b *Backend) Write(dst kernels.Buf, off int, src []float32) { copy(f32(dst)[off:], src) }

// Read implements kernels.Backend.
func (b *Backend) Read(src kernels.Buf, off int, dst []float32) { copy(dst, f32(src)[off:]) }

// parallel splits [0,n) into contiguous chunks across the workers. Work
// below minPer items per worker runs on fewer goroutines, so tiny ops do
// not pay for synchronisation.
func (b *Backend) parallel(n, minPer int, fn func(lo, hi int)) {
	w := b.workers
	if minPer > 0 && n/minPer < w {
		w = max(n/minPer, 1)
	}
	if w <= 1 || n <= 1 {
		fn(0, n)
		return
	}
	w = min(w, n)
	b.pool.do(n, w, fn)
}

// Add implements kernels.Backend.
func (b *Backend) Add(dst, x, y kernels.Buf, n int) {
	d, a, c := f32(dst)[:n], f32(x)[:n], f32(y)[:n]
	for i := range d {
		d[i] = a[i] + c[i]
	}
}

// SwiGLU implements kernels.Backend: silu(gate)·up, the SiLU by
// vmath.SigmoidMul's vector loops, 256 elements at a time through a
// scratch on the stack, so dst may be gate or up.
func (b *Backend) SwiGLU(dst, gate, up kernels.Buf, n int) {
	d, g, u := f32(dst)[:n], f32(gate)[:n], f32(up)[:n]
	b.parallel(n, 1<<14, func(lo, hi int) {
		var scratch [256]float32
		for off := lo; off < hi; off += len(scratch) {
			t := scratch[:min(len(scratch), hi-off)]
			copy(t, g[off:])
			vmath.SigmoidMul(t, t)
			for i, v := range t {
				d[off+i] = v * u[off+i]
			}
		}
	})
}

// RMSNorm implements kernels.Backend.
func (b *Backend) RMSNorm(dst, x kernels.Buf, w kernels.Tensor, rows, dim int, eps float32) {
	wt := w.(*tensor)
	scale := wt.vector()
	d, s := f32(dst), f32(x)
	for r := 0; r < rows; r++ {
		row := s[r*dim : (r+1)*dim]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(dim)+float64(eps)))
		out := d[r*dim : (r+1)*dim]
		for i, v := range row {
			out[i] = v * inv * scale[i]
		}
	}
}

// RoPE implements kernels.Backend.
func (b *Backend) RoPE(x kernels.Buf, pos []int32, heads, headDim int, r *kernels.RoPE) {
	d := f32(x)
	half := r.RotaryDim / 2
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	cos := make([]float32, half)
	sin := make([]float32, half)
	for row, p := range pos {
		for i, f := range r.InvFreq[:half] {
			// float32 angle, as transformers computes it in float32.
			ang := float32(p) * f
			cos[i] = float32(math.Cos(float64(ang))) * scale
			sin[i] = float32(math.Sin(float64(ang))) * scale
		}
		for h := 0; h < heads; h++ {
			v := d[(row*heads+h)*headDim:]
			if r.NeoX {
				for i := 0; i < half; i++ {
					a, c := v[i], v[i+half]
					v[i] = a*cos[i] - c*sin[i]
					v[i+half] = c*cos[i] + a*sin[i]
				}
			} else {
				for i := 0; i < half; i++ {
					a, c := v[2*i], v[2*i+1]
					v[2*i] = a*cos[i] - c*sin[i]
					v[2*i+1] = c*cos[i] + a*sin[i]
				}
			}
		}
	}
}

// Gather implements kernels.Backend.
func (b *Backend) Gather(dst, src kernels.Buf, idx []int32, dim int) {
	d, s := f32(dst), f32(src)
	for i, r := range idx {
		copy(d[i*dim:(i+1)*dim], s[int(r)*dim:(int(r)+1)*dim])
	}
}

// ScatterAdd implements kernels.Backend.
func (b *Backend) ScatterAdd(dst, src kernels.Buf, idx []int32, w []float32, dim int) {
	d, s := f32(dst), f32(src)
	for i, r := range idx {
		out := d[int(r)*dim : (int(r)+1)*dim]
		in := s[i*dim : (i+1)*dim]
		for j := range out {
			out[j] += w[i] * in[j]
		}
	}
}

// Embed implements kernels.Backend.
func (b *Backend) Embed(dst kernels.Buf, table kernels.Tensor, ids []int32) {
	t := table.(*tensor)
	d := f32(dst)
	cols := t.w.Cols()
	for i, id := range ids {
		t.rowTo(int(id), d[i*cols:(i+1)*cols])
	}
}

// AddBias implements kernels.Backend.
func (b *Backend) AddBias(x kernels.Buf, bias kernels.Tensor, rows, dim int) {
	v := bias.(*tensor).vector()
	d := f32(x)
	for r := 0; r < rows; r++ {
		row := d[r*dim : (r+1)*dim]
		for i := range row {
			row[i] += v[i]
		}
	}
}

// ViewBuf implements kernels.BufViewer: a full slice expression, so that
// the view cannot grow into what follows it.
func (b *Backend) ViewBuf(x kernels.Buf, off, n int) kernels.Buf {
	return &Buf{D: f32(x)[off : off+n : off+n]}
}

// CopyBuf implements kernels.BufCopier.
func (b *Backend) CopyBuf(dst, src kernels.Buf, n int) { copy(f32(dst)[:n], f32(src)[:n]) }
