//go:build cuda

package cuda

//go:generate nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o hybrid_fused.ptx hybrid_fused.cu

/*
#include <cuda.h>
#include <string.h>

// pl_launch_cluster is pl_launch (driver.go) on a 1-D grid of 1-D clusters
// of cluster blocks, with programmatic stream serialization when pdl is
// set (see pl_launch_pdl).
static CUresult pl_launch_cluster(CUfunction f, unsigned gx, unsigned bx, unsigned cluster, int pdl, CUstream s,
                                  unsigned long long *a, int n) {
	void *params[32];
	for (int i = 0; i < n && i < 32; i++) params[i] = &a[i];
	CUlaunchAttribute attr[2];
	memset(attr, 0, sizeof attr);
	attr[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	attr[0].value.clusterDim.x = cluster;
	attr[0].value.clusterDim.y = 1;
	attr[0].value.clusterDim.z = 1;
	attr[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attr[1].value.programmaticStreamSerializationAllowed = 1;
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = gx;
	cfg.gridDimY = 1;
	cfg.gridDimZ = 1;
	cfg.blockDimX = bx;
	cfg.blockDimY = 1;
	cfg.blockDimZ = 1;
	cfg.hStream = s;
	cfg.attrs = attr;
	cfg.numAttrs = pdl ? 2 : 1;
	return cuLaunchKernelEx(&cfg, f, params, NULL);
}
*/
import "C"

import (
	_ "embed"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/pocketllm/pocketllm/kernels"
)

// The fused one-token DeltaNet mix (kernels.FusedDeltaMix), kernel in
// hybrid_fused.cu: one launch of thread-block clusters instead of
// causal_conv1d, gated_delta_rule and rms_norm_gated. Not yet run on a
// GPU, so off by default:
//
//	POCKET_DELTA_FUSED=1 one-token Gated DeltaNet mixes (conv1d, delta rule, gated norm) run as one
//	                     clustered kernel (hybrid_fused.cu), not three launches (not yet run on a GPU)
//
// (The switch belongs in switches.go's list; it is read here, once, until
// it moves there.)
var deltaFusedSwitch = os.Getenv("POCKET_DELTA_FUSED") == "1"

//go:embed hybrid_fused.ptx
var hybridFusedPTX string

var _ kernels.FusedDeltaMix = (*Backend)(nil)

// Limits of delta_mix (hybrid_fused.cu: MW*MR, MKMAX, the portable
// cluster size).
const (
	maxMixDK      = 128
	maxMixConv    = 4
	maxMixCluster = 8
)

// deltaMixMod is a backend's fused-mix state: whether DeltaMix runs at
// all (read without b.mu, so that a declining call costs no context
// switch), and the module, loaded on the first fused call (b.mu held).
type deltaMixMod struct {
	on     atomic.Bool // POCKET_DELTA_FUSED, SetDeltaFused
	loaded bool
	fn     [len(mixCW)]cFunc // delta_mix_<cw>
}

// mixCW are the column counts per lane delta_mix is compiled for.
var mixCW = [...]int{1, 2, 4}

// deltaMixMods holds each backend's deltaMixMod. (Its natural home is a
// field of hybridMod; it lives here while hybrid.go is being edited
// elsewhere.) Modules are per context, hence per backend.
var deltaMixMods = struct {
	sync.Mutex
	m map[*Backend]*deltaMixMod
}{m: map[*Backend]*deltaMixMod{}}

// deltaMix returns b's fused-mix state, made on first use without loading
// anything.
func (b *Backend) deltaMix() *deltaMixMod {
	deltaMixMods.Lock()
	defer deltaMixMods.Unlock()
	m := deltaMixMods.m[b]
	if m == nil {
		m = &deltaMixMod{}
		m.on.Store(deltaFusedSwitch)
		deltaMixMods.m[b] = m
	}
	return m
}

// SetDeltaFused turns the fused one-token mix on or off for this backend
// (default POCKET_DELTA_FUSED), so that conformance can check it whatever
// the environment says; it returns the previous setting.
func (b *Backend) SetDeltaFused(on bool) (was bool) {
	return b.deltaMix().on.Swap(on)
}

// deltaMixPlan is delta_mix's geometry for s: one cluster per key head of
// rep = VHeads/KHeads value heads × tiles blocks, each block 32·cw state
// columns of one value head (cw selects the kernel). tiles is the most,
// up to dv/32, that keeps a cluster within the portable 8 blocks, and cw
// the fewest columns per lane that then cover dv. ok is false for shapes
// the kernel does not take (the caller runs the three ops).
func deltaMixPlan(s kernels.DeltaShape) (cw, tiles, cluster int, ok bool) {
	if s.KHeads < 1 || s.VHeads%s.KHeads != 0 || s.DK < 1 || s.DK > maxMixDK || s.DV < 1 ||
		s.ConvKernel < 1 || s.ConvKernel > maxMixConv {
		return 0, 0, 0, false
	}
	rep, groups := s.VHeads/s.KHeads, cdiv(s.DV, 32)
	if rep > maxMixCluster {
		return 0, 0, 0, false
	}
	need := cdiv(groups, min(groups, maxMixCluster/rep))
	cw = 0
	for _, c := range mixCW {
		if cw == 0 && need <= c {
			cw = c
		}
	}
	if cw == 0 {
		return 0, 0, 0, false
	}
	tiles = cdiv(s.DV, 32*cw)
	return cw, tiles, rep * tiles, true
}

// DeltaMix implements kernels.FusedDeltaMix: one clustered launch of
// delta_mix (hybrid_fused.cu). It declines while switched off
// (POCKET_DELTA_FUSED, SetDeltaFused), for shapes deltaMixPlan rejects,
// and for weights CausalConv1D, GatedDeltaRule or RMSNormGated would
// refuse, so that those report the error.
func (b *Backend) DeltaMix(core, qkv, z, a, bb, convState, recState kernels.Buf, conv, aLog, dtBias, norm kernels.Tensor,
	s kernels.DeltaShape, eps float32) bool {
	cw, tiles, cluster, ok := deltaMixPlan(s)
	if !ok {
		return false
	}
	t, isT := conv.(*tensor)
	if !isT || t.w.DType != kernels.F32 && t.w.DType != kernels.F16 && t.w.DType != kernels.BF16 ||
		t.w.Elems() != s.ConvDim()*s.ConvKernel {
		return false
	}
	al, dt, nw := normVec(aLog, s.VHeads), normVec(dtBias, s.VHeads), normVec(norm, s.DV)
	vd := s.VHeads * s.DV
	if al == 0 || dt == 0 || nw == 0 || core.Len() < vd || qkv.Len() < s.ConvDim() || z.Len() < vd ||
		a.Len() < s.VHeads || bb.Len() < s.VHeads || convState.Len() < s.ConvStateLen() || recState.Len() < s.RecStateLen() {
		return false
	}
	m := b.deltaMix()
	if !m.on.Load() {
		return false
	}
	// enter also launches the deferred GEMVs, which may be the ones that
	// write qkv, z, a and b.
	if !b.enter() {
		b.exit()
		return true
	}
	defer b.exit()
	if !m.loaded {
		names := map[string]*cFunc{}
		for i, c := range mixCW {
			names[fmt.Sprintf("delta_mix_%d", c)] = &m.fn[i]
		}
		if _, err := loadModule(hybridFusedPTX, "hybrid_fused", names); err != nil {
			b.fail(err)
			return true
		}
		m.loaded = true
	}
	f := m.fn[0]
	for i, c := range mixCW {
		if c == cw {
			f = m.fn[i]
		}
	}
	b.a(ptr(dptr(core)), ptr(dptr(qkv)), ptr(dptr(z)), ptr(dptr(a)), ptr(dptr(bb)), ptr(dptr(convState)),
		ptr(dptr(recState)), ptr(t.data), uint64(t.w.DType), ptr(al), ptr(dt), ptr(nw), i32(s.KHeads), i32(s.VHeads),
		i32(s.DK), i32(s.DV), i32(s.ConvKernel), i32(tiles), f32(eps))
	// Launched as the three kernels it replaces are (runHybrid): with
	// programmatic dependent launch unless switched off.
	pdl := C.int(0)
	if switches.hybridPDL && !switches.noPDL {
		pdl = 1
	}
	b.fail(cuErr("launch delta_mix", C.pl_launch_cluster(f, C.uint(s.KHeads*cluster), C.uint(256), C.uint(cluster),
		pdl, b.s, (*C.ulonglong)(unsafe.Pointer(&b.args[0])), C.int(b.nargs))))
	return true
}
