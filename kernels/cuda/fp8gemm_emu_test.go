package cuda

// A CPU emulation of fp8gemm.cu, no GPU needed: fp8_quant's rounding bit
// for bit, and fp8_gemm_t/_c as their threads run it — loadStage's
// thread → chunk → swizzled shared-memory copies, each lane's ldmatrix
// addresses, ldmatrix, the E4M3 → f16 widening and mma.sync m16n8k16 as
// the PTX ISA defines them (not as the kernel assumes), the kernel's split
// of each m16n8k32 E4M3 fragment into two of those, the fold by the
// stage's scales and the epilogue's lane → element stores. f8Kernel holds the kernel's index
// formulas; TestFP8GEMMMutants checks that a wrong one fails.

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// Shapes of fp8gemm.cu (QG, BM = BN, THREADS).
const (
	emuQG      = 128
	emuTile    = 128
	emuThreads = 256
)

// e4m3 is cvt.rn.satfinite.e4m3x2.f32 on one value: round to nearest
// even, magnitudes past 448 clamped to 448, NaN to 0x7f.
func e4m3(f float32) byte {
	if f != f {
		return 0x7f
	}
	var sign byte
	v := float64(f)
	if math.Signbit(v) {
		sign, v = 0x80, -v
	}
	if v >= 448 {
		return sign | 0x7e
	}
	quantum := math.Ldexp(1, -9) // subnormals: m·2⁻⁹
	if v >= math.Ldexp(1, -6) {
		_, e := math.Frexp(v) // v = fr·2^e, fr in [0.5, 1)
		quantum = math.Ldexp(1, e-1-3)
	}
	r := math.RoundToEven(v/quantum) * quantum // exact: quantum is a power of two
	if r == 0 {
		return sign
	}
	if r < math.Ldexp(1, -6) {
		return sign | byte(r/math.Ldexp(1, -9))
	}
	_, e := math.Frexp(r)
	mant := (r/math.Ldexp(1, e-1) - 1) * 8
	return sign | byte(e-1+7)<<3 | byte(mant)
}

// emuQuant is fp8_quant: per (row, 128 columns) s = amax/448 (1 when not
// positive), q = E4M3(x/s), both IEEE float32 divisions.
func emuQuant(x []float32, rows, in int) (q []byte, sc []float32) {
	q, sc = make([]byte, rows*in), make([]float32, rows*in/emuQG)
	for gw := range sc {
		grp := x[gw*emuQG : (gw+1)*emuQG]
		var m float32
		for _, v := range grp {
			if a := float32(math.Abs(float64(v))); a > m {
				m = a
			}
		}
		s := m / 448
		if !(s > 0) {
			s = 1
		}
		sc[gw] = s
		for i, v := range grp {
			q[gw*emuQG+i] = e4m3(v / s)
		}
	}
	return q, sc
}

// f8Kernel is the kernel's index mapping, one field per formula of
// fp8gemm.cu, so that a test can replace one.
type f8Kernel struct {
	swzW func(r, c int) int // swz where loadStage writes
	swzR func(r, c int) int // swz where the ldmatrix addresses read
	// aLane and bLane are the lane's ldmatrix row (within the warp tile)
	// and chunk offset: (ar - wm, ac) and (br - wn, bc).
	aLane, bLane func(lane int) (row, chunk int)
	// bFrag is which ldmatrix register of pair p goes to B fragment
	// 2p+f, register k.
	bFrag func(f, k int) int
	// widen is mmaE4M3's half h: the f16 registers of the m16n8k16 step
	// from a lane's E4M3 A and B registers.
	widen func(a *[4]uint32, b *[2]uint32, h int) ([4]uint32, [2]uint32)
	// out is the tile row and column of accumulator e of fragment
	// (mi, ni) in warp (wm, wn) for a lane.
	out func(wm, wn, mi, ni, e, lane int) (row, col int)
}

func kernelSwz(r, c int) int { return r*emuQG + (c^(r&7))<<4 }

// fp8gemmKernel is the mapping of fp8gemm.cu as written.
var fp8gemmKernel = f8Kernel{
	swzW:  kernelSwz,
	swzR:  kernelSwz,
	aLane: func(l int) (int, int) { return l & 15, l >> 4 },
	bLane: func(l int) (int, int) { return (l>>4)<<3 + l&7, (l >> 3) & 1 },
	bFrag: func(f, k int) int { return 2*f + k },
	widen: func(a *[4]uint32, b *[2]uint32, h int) ([4]uint32, [2]uint32) {
		g0, g1 := e4m3x4(a[2*h])
		e0, e1 := e4m3x4(a[2*h+1])
		b0, b1 := e4m3x4(b[h])
		return [4]uint32{g0, e0, g1, e1}, [2]uint32{b0, b1}
	},
	out: func(wm, wn, mi, ni, e, l int) (int, int) {
		return wm + 16*mi + 8*(e>>1) + l>>2, wn + 8*ni + 2*(l&3) + e&1
	},
}

// f8Problem is one GEMM: quantized activation q/sa, weight w/ws as the
// kernels read them.
type f8Problem struct {
	rows, out, in, b0, b1, nsc int
	q                          []byte
	sa                         []float32
	w                          []byte
	ws                         []float32
}

// ldsm4 is ldmatrix.sync.aligned.m8n8.x4.shared.b16 (PTX ISA 9.7.14.5.15):
// lanes 8j..8j+7 give the addresses of matrix j's eight 16-byte rows, and
// lane l receives in register j the 32-bit word l&3 of matrix j's row l>>2.
func ldsm4(smem []byte, addr *[32]int) (r [32][4]uint32) {
	for l := range 32 {
		for j := range 4 {
			a := addr[8*j+l>>2] + 4*(l&3)
			r[l][j] = uint32(smem[a]) | uint32(smem[a+1])<<8 | uint32(smem[a+2])<<16 | uint32(smem[a+3])<<24
		}
	}
	return r
}

// e4m3x4 is cvt.rn.f16x2.e4m3x2 on each half of w (lo: bytes 0, 1; hi:
// bytes 2, 3; the low byte to the low half). The widening is exact, so an
// f16 register is kept as the two E4M3 bytes it holds: f16Half decodes
// half i.
func e4m3x4(w uint32) (lo, hi uint32) { return w & 0xffff, w >> 16 }

func f16Half(r uint32, i int) float64 {
	return float64(kernels.FP8E4M3ToF32(byte(r >> (8 * i))))
}

// mma16816 is mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 by the
// PTX ISA's fragment layout (9.7.14.5.8): A element i (half i%2 of
// register i/2) is row g for i in {0, 1, 4, 5}, else g+8, column 2t +
// (i&1) (+8 for i ≥ 4); B element i is row (k) 2t + (i&1) (+8 for i ≥ 2),
// column g; D's c_i is row g (+8 for i ≥ 2), column 2t + (i&1). The
// products are exact; the sum is taken in float64 and rounded once.
func mma16816(d *[32][4]float32, a *[32][4]uint32, b *[32][2]uint32) {
	var A [16][16]float64
	var B [16][8]float64
	for l := range 32 {
		g, t := l>>2, l&3
		for i := range 8 {
			row := g
			if i == 2 || i == 3 || i >= 6 {
				row = g + 8
			}
			col := 2*t + i&1
			if i >= 4 {
				col += 8
			}
			A[row][col] = f16Half(a[l][i/2], i%2)
		}
		for i := range 4 {
			k := 2*t + i&1
			if i >= 2 {
				k += 8
			}
			B[k][g] = f16Half(b[l][i/2], i%2)
		}
	}
	for l := range 32 {
		g, t := l>>2, l&3
		for i := range 4 {
			row, col := g+8*(i>>1), 2*t+i&1
			s := float64(d[l][i])
			for k := range 16 {
				s += A[row][k] * B[k][col]
			}
			d[l][i] = float32(s)
		}
	}
}

// mmaE4M3 is the kernel's m16n8k32 E4M3 step: two f16 steps on the
// widened registers.
func (k *f8Kernel) mmaE4M3(d *[32][4]float32, a *[32][4]uint32, b *[32][2]uint32) {
	for h := range 2 {
		var a16 [32][4]uint32
		var b16 [32][2]uint32
		for l := range 32 {
			a16[l], b16[l] = k.widen(&a[l], &b[l], h)
		}
		mma16816(d, &a16, &b16)
	}
}

// run is fp8_gemm_t (uw) or fp8_gemm_c into y (rows·out, overwritten
// where the kernel stores).
func (k *f8Kernel) run(p *f8Problem, uw bool, y []float32) {
	const tile = emuTile * emuQG
	for by := 0; by < (p.rows+emuTile-1)/emuTile; by++ {
		for bx := 0; bx < (p.out+emuTile-1)/emuTile; bx++ {
			m0, n0 := by*emuTile, bx*emuTile
			var acc [8][32][4][4][4]float32 // [warp][lane][mi][ni][e]
			for kt := 0; kt < p.in/emuQG; kt++ {
				// loadStage
				st := make([]byte, 2*tile)
				var ssa, ssw [emuTile]float32
				k0 := kt * emuQG
				for tid := range emuThreads {
					for j := range 4 {
						r, c := tid>>3+32*j, tid&7
						copy(st[k.swzW(r, c):][:16], p.q[min(m0+r, p.rows-1)*p.in+k0+16*c:][:16])
						copy(st[tile+k.swzW(r, c):][:16], p.w[min(n0+r, p.out-1)*p.in+k0+16*c:][:16])
					}
					if tid < emuTile {
						ssa[tid] = p.sa[min(m0+tid, p.rows-1)*(p.in/emuQG)+kt]
					} else {
						ssw[tid-emuTile] = p.ws[min(n0+tid-emuTile, p.out-1)/p.b0*p.nsc+k0/p.b1]
					}
				}
				for warp := range 8 {
					k.warpStage(st, &ssa, &ssw, warp, uw, &acc[warp])
				}
			}
			for warp := range 8 {
				wm, wn := (warp>>2)*64, (warp&3)*32
				for l := range 32 {
					for mi := range 4 {
						for ni := range 4 {
							for e := range 4 {
								r, c := k.out(wm, wn, mi, ni, e, l)
								if r, c := m0+r, n0+c; r < p.rows && c < p.out {
									y[r*p.out+c] = acc[warp][l][mi][ni][e]
								}
							}
						}
					}
				}
			}
		}
	}
}

// warpStage is one warp's k steps over a stage and the fold into acc.
func (k *f8Kernel) warpStage(st []byte, ssa, ssw *[emuTile]float32, warp int, uw bool, acc *[32][4][4][4]float32) {
	const tile = emuTile * emuQG
	wm, wn := (warp>>2)*64, (warp&3)*32
	var part [4][4][32][4]float32
	for ks := range emuQG / 32 {
		var a [4][32][4]uint32
		var b [4][32][2]uint32
		for mi := range 4 {
			var addr [32]int
			for l := range 32 {
				r, c := k.aLane(l)
				addr[l] = k.swzR(wm+r+16*mi, 2*ks+c)
			}
			a[mi] = ldsm4(st, &addr)
		}
		for pp := range 2 {
			var addr [32]int
			for l := range 32 {
				r, c := k.bLane(l)
				addr[l] = tile + k.swzR(wn+r+16*pp, 2*ks+c)
			}
			r := ldsm4(st, &addr)
			for l := range 32 {
				for f := range 2 {
					for kk := range 2 {
						b[2*pp+f][l][kk] = r[l][k.bFrag(f, kk)]
					}
				}
			}
		}
		for mi := range 4 {
			for ni := range 4 {
				k.mmaE4M3(&part[mi][ni], &a[mi], &b[ni])
			}
		}
	}
	for l := range 32 {
		for mi := range 4 {
			for ni := range 4 {
				for e := range 4 {
					r, c := k.out(wm, wn, mi, ni, e, l)
					f := ssa[r]
					if uw {
						f *= ssw[0]
					} else {
						f *= ssw[c]
					}
					acc[l][mi][ni][e] = float32(math.FMA(float64(part[mi][ni][l][e]), float64(f), float64(acc[l][mi][ni][e])))
				}
			}
		}
	}
}

// f8Case builds a problem like conformance's: x ~ N(0, 1) (one all-zero
// group), random E4M3 weight bytes without NaNs, block scales of about
// 1/(64·√in). It returns the unquantized x and the float64 weight too.
func f8Case(rng *rand.Rand, rows, out, in, b0, b1 int) (*f8Problem, []float32, []float64) {
	x := make([]float32, rows*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range emuQG { // row 1, group 0: amax 0
		x[min(1, rows-1)*in+i] = 0
	}
	p := &f8Problem{rows: rows, out: out, in: in, b0: b0, b1: b1, nsc: (in + b1 - 1) / b1}
	p.q, p.sa = emuQuant(x, rows, in)
	p.w = make([]byte, out*in)
	for i := range p.w {
		v := byte(rng.IntN(256))
		if v&0x7f == 0x7f {
			v &^= 1
		}
		p.w[i] = v
	}
	p.ws = make([]float32, (out+b0-1)/b0*p.nsc)
	std := 1 / math.Sqrt(float64(in))
	for i := range p.ws {
		p.ws[i] = float32(std) * (0.5 + rng.Float32()) / 64
	}
	wf := make([]float64, out*in)
	for n := range out {
		for c := range in {
			wf[n*in+c] = float64(kernels.FP8E4M3ToF32(p.w[n*in+c])) * float64(p.ws[n/b0*p.nsc+c/b1])
		}
	}
	return p, x, wf
}

// gemm64 is y = x·wᵀ in float64, x given per element by xf (nmse is
// hybrid_test.go's).
func gemm64(rows, out, in int, xf func(r, c int) float64, wf []float64) []float64 {
	y := make([]float64, rows*out)
	for r := range rows {
		xr := make([]float64, in)
		for c := range in {
			xr[c] = xf(r, c)
		}
		for n := range out {
			var s float64
			for c, w := range wf[n*in : (n+1)*in] {
				s += xr[c] * w
			}
			y[r*out+n] = s
		}
	}
	return y
}

// tolF8GEMM is conformance's tolerance for this path against the
// unquantized product (cmd/pocket-worker/conformance_fp8gemm.go derives
// it: E4M3 activation rounding gives an NMSE of ~1e-3).
const tolF8GEMM = 4e-3

var f8Shapes = []struct {
	rows, out, in, b0, b1 int
	uw                    bool
}{
	{200, 256, 384, 128, 128, true}, // two row tiles (the second ragged), three stages
	{70, 200, 640, 64, 256, false},  // a ragged column tile, b0 under the tile, b1 = 256 with a partial last block
	{130, 130, 128, 128, 128, true}, // one stage, ragged both ways
	{64, 384, 256, 256, 128, true},  // b0 over the tile
}

// TestFP8GEMMEmulated runs the emulated kernels against float64 products
// of the same quantized inputs (only fp32 rounding between them) and of
// the unquantized activation (the E4M3 rounding; conformance's
// tolerance), and checks that every output element is stored.
func TestFP8GEMMEmulated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, s := range f8Shapes {
		p, x, wf := f8Case(rng, s.rows, s.out, s.in, s.b0, s.b1)
		y := make([]float32, s.rows*s.out)
		for i := range y {
			y[i] = float32(math.NaN())
		}
		fp8gemmKernel.run(p, s.uw, y)
		for i, v := range y {
			if v != v {
				t.Fatalf("%v: y[%d] not stored", s, i)
			}
		}
		quant := gemm64(s.rows, s.out, s.in, func(r, c int) float64 {
			return float64(kernels.FP8E4M3ToF32(p.q[r*s.in+c])) * float64(p.sa[r*(s.in/emuQG)+c/emuQG])
		}, wf)
		exact := gemm64(s.rows, s.out, s.in, func(r, c int) float64 { return float64(x[r*s.in+c]) }, wf)
		eq, ex := nmse(y, quant), nmse(y, exact)
		t.Logf("%v: nmse %.2e against the quantized product, %.2e against the exact one", s, eq, ex)
		if eq > 1e-11 {
			t.Errorf("%v: nmse %.2e against the product of the quantized inputs", s, eq)
		}
		if ex > tolF8GEMM/2 {
			t.Errorf("%v: nmse %.2e against the exact product: over half conformance's %.0e", s, ex, tolF8GEMM)
		}
	}
}

// TestFP8GEMMMutants: each single wrong index formula must fail the
// quantized comparison by far.
func TestFP8GEMMMutants(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	p, _, wf := f8Case(rng, 130, 130, 256, 128, 128)
	quant := gemm64(p.rows, p.out, p.in, func(r, c int) float64 {
		return float64(kernels.FP8E4M3ToF32(p.q[r*p.in+c])) * float64(p.sa[r*(p.in/emuQG)+c/emuQG])
	}, wf)
	plain := func(r, c int) int { return r*emuQG + c<<4 }
	mutants := map[string]func(k *f8Kernel){
		"reads unswizzled":   func(k *f8Kernel) { k.swzR = plain },
		"writes unswizzled":  func(k *f8Kernel) { k.swzW = plain },
		"A as B's lanes":     func(k *f8Kernel) { k.aLane = fp8gemmKernel.bLane },
		"B as A's lanes":     func(k *f8Kernel) { k.bLane = fp8gemmKernel.aLane },
		"B registers paired": func(k *f8Kernel) { k.bFrag = func(f, kk int) int { return f + 2*kk } },
		"A k halves swapped": func(k *f8Kernel) { k.aLane = func(l int) (int, int) { return l & 15, 1 - l>>4 } },
		"B f16 pairs crossed": func(k *f8Kernel) {
			k.widen = func(a *[4]uint32, b *[2]uint32, h int) ([4]uint32, [2]uint32) {
				a16, b16 := fp8gemmKernel.widen(a, b, h)
				return a16, [2]uint32{b16[1], b16[0]}
			}
		},
		"A rows g, g+8 crossed": func(k *f8Kernel) {
			k.widen = func(a *[4]uint32, b *[2]uint32, h int) ([4]uint32, [2]uint32) {
				a16, b16 := fp8gemmKernel.widen(a, b, h)
				return [4]uint32{a16[1], a16[0], a16[3], a16[2]}, b16
			}
		},
		"one k half only": func(k *f8Kernel) {
			k.widen = func(a *[4]uint32, b *[2]uint32, _ int) ([4]uint32, [2]uint32) {
				return fp8gemmKernel.widen(a, b, 0)
			}
		},
		"D rows g+8 first": func(k *f8Kernel) {
			k.out = func(wm, wn, mi, ni, e, l int) (int, int) {
				r, c := fp8gemmKernel.out(wm, wn, mi, ni, e, l)
				return r ^ 8, c
			}
		},
		"D columns swapped": func(k *f8Kernel) {
			k.out = func(wm, wn, mi, ni, e, l int) (int, int) {
				r, c := fp8gemmKernel.out(wm, wn, mi, ni, e, l)
				return r, c ^ 1
			}
		},
	}
	for name, mutate := range mutants {
		k := fp8gemmKernel
		mutate(&k)
		y := make([]float32, p.rows*p.out)
		k.run(p, true, y)
		if e := nmse(y, quant); e < 1e-2 {
			t.Errorf("mutant %q passes: nmse %.2e", name, e)
		} else {
			t.Logf("mutant %q: nmse %.2e", name, e)
		}
	}
}

// TestE4M3 checks the emulated conversion: every finite E4M3 value
// converts to itself, midpoints round to the even neighbour, and beyond
// 448 saturates.
func TestE4M3(t *testing.T) {
	for b := range 256 {
		v := kernels.FP8E4M3ToF32(byte(b))
		if v != v {
			continue
		}
		if got := e4m3(v); got != byte(b) {
			t.Fatalf("e4m3(%g) = %#x, want %#x", v, got, b)
		}
		if b&0x7f < 0x7e { // the midpoint to the next magnitude
			hi := kernels.FP8E4M3ToF32(byte(b + 1))
			mid := float32((float64(v) + float64(hi)) / 2)
			want := byte(b)
			if b&1 == 1 {
				want = byte(b + 1)
			}
			if got := e4m3(mid); got != want {
				t.Fatalf("e4m3(%g) = %#x, want %#x (between %#x and %#x)", mid, got, want, b, b+1)
			}
		}
	}
	for _, c := range []struct {
		v    float32
		want byte
	}{{464, 0x7e}, {1e9, 0x7e}, {-500, 0xfe}, {float32(math.Inf(1)), 0x7e}, {1e-4, 0}, {-1e-4, 0x80}} {
		if got := e4m3(c.v); got != c.want {
			t.Errorf("e4m3(%g) = %#x, want %#x", c.v, got, c.want)
		}
	}
}
