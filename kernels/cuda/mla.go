//go:build cuda

package cuda

//go:generate sh -c "nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 -o mla.ptx mla.cu && gzip -n9f mla.ptx"

import (
	_ "embed"
	"fmt"

	"gorgonia.org/cu"

	"github.com/pocketllm/pocketllm/kernels"
)

// Latent attention (kernels.MLAOps) on the GPU, kernels in mla.cu, loaded
// on first use. Like Attention it uploads only the block table and the
// start position (through b.put) and sizes its grids and scratch by the
// table's capacity under graph capture, so one captured decode step
// serves every position up to it; DSA's selection runs on the device and
// is never read back.

//go:embed mla.ptx.gz
var mlaPTX []byte

var _ kernels.MLAOps = (*Backend)(nil)

// Limits of the kernels (mla.cu: MMAXD; dsa.cuh: DQMAX, DREG).
const (
	maxMLAHeadDim = 1024
	maxDSAQ       = 8192
	maxDSADim     = 256
	mlaHW         = 4    // MLA_HW: heads a warp of mla_partial_576
	maxMaskWords  = 1024 // DSA_MASK_MAXW: words a row of dsa_mask's mask
	// dsa_scores_tc (DS_*): rows a block, heads and width it takes, the
	// positions a block covers, its shared memory, and the least rows
	// a pass sends to it (decode steps keep dsa_scores: a warp a position
	// is enough for one row, and a pair of rows would waste half).
	dsaTCRows, dsaTCHeads, dsaTCDim = 2, 64, 128
	dsaTCSpan                       = 8 * 64
	dsaTCShm                        = (2*64*132 + 2*64*72 + 2*64) * 4
	dsaTCMinRows                    = 16
	// mla_tc (MT_*): heads a block, positions a tile, shared memory.
	mlaTCHeads, mlaTCTile = 32, 32
	mlaTCShm              = 2*32*580*4 + 32*584*2 + 32*33*4 + 32*40*2 + 3*32*4
)

type mlaMod struct {
	partial, combine, scores, topk cFunc
	partial576                     cFunc // DeepSeek's 576/512, mlaHW heads a warp
	mask                           cFunc // dsa_mask
	scoresTC                       cFunc // dsa_scores_tc (prompt passes)
	tc                             cFunc // mla_tc: DeepSeek's 576/512 on the tensor cores
	// Scratch, grown as needed and never freed (queued work or a
	// captured graph may still use an old one): the split partials, and
	// DSA's scores, marks and selected positions (with their counts).
	part, dsa       cu.DevicePtr
	partN, dsaBytes int64
}

func (b *Backend) mlaModule() (*mlaMod, error) {
	if b.mla != nil {
		return b.mla, nil
	}
	m := &mlaMod{}
	if _, err := loadModule(mlaPTX, "MLA", map[string]*cFunc{"mla_partial": &m.partial, "mla_partial_576": &m.partial576, "mla_combine": &m.combine,
		"dsa_scores": &m.scores, "dsa_topk": &m.topk, "dsa_mask": &m.mask, "dsa_scores_tc": &m.scoresTC, "mla_tc": &m.tc}); err != nil {
		return nil, err
	}
	if err := setMaxShm(m.scoresTC, dsaTCShm); err != nil {
		return nil, err
	}
	if err := setMaxShm(m.tc, mlaTCShm); err != nil {
		return nil, err
	}
	b.mla = m
	return m, nil
}

// MLAttention implements kernels.MLAOps: split-K flash decoding over the
// shared latent rows (mla.cu): DeepSeek's 576/512 on the bf16 tensor
// cores, 32 heads of a row a block (mla_tc); other dims on the CUDA cores,
// eight heads a block.
func (b *Backend) MLAttention(dst, q kernels.Buf, kp kernels.KVPool, layer int, seq kernels.AttnSeq, rows, heads, dv int, scale float32, dsa *kernels.DSA) {
	if !b.enter() {
		b.exit()
		return
	}
	defer b.exit()
	m, err := b.mlaModule()
	if err != nil {
		b.fail(err)
		return
	}
	p, ok := kp.(*kvPool)
	if !ok {
		b.fail(fmt.Errorf("cuda: KV pool of another backend: %w", kernels.ErrUnsupported))
		return
	}
	if p.spec.Half {
		b.fail(fmt.Errorf("cuda: latent attention over a float16 KV pool: %w", kernels.ErrUnsupported))
		return
	}
	s := p.spec
	dk := s.HeadDimK
	switch {
	case s.KVHeads != 1 || dk > maxMLAHeadDim || dk%4 != 0 || dv < 1 || dv > dk:
		b.fail(fmt.Errorf("cuda: latent attention over %d KV heads of width %d (≤ %d, a multiple of 4), value width %d: %w",
			s.KVHeads, dk, maxMLAHeadDim, dv, kernels.ErrUnsupported))
		return
	case rows < 1 || heads < 1:
		return
	}
	// Positions the kernels may see: the pass's, or under capture the
	// table's capacity (the start is only known on the device then).
	ctx := seq.Start + rows
	if b.cap != nil {
		ctx = len(seq.Table) * s.BlockSize
	}
	tp := b.put(kTable, words(seq.Table))
	st := b.put(kStart, []uint32{uint32(seq.Start)})
	var sel, cnt cu.DevicePtr
	listLen, topk := ctx, 0
	if dsa != nil {
		if sel, cnt = b.dsaSelect(m, p, layer, tp, st, rows, ctx, dsa); b.err != nil {
			return
		}
		listLen, topk = min(ctx, dsa.TopK), dsa.TopK
	}
	// DeepSeek's dims: 32 heads a block on the tensor cores, one block an
	// SM (its two tiles of fp32 latent rows take 145 KiB), one wave (two
	// waves measured slower: 525 against 542 tok/s on the V3 slice at 8192
	// positions; each split adds a partial of dv+2 floats a head that
	// mla_combine reads back). Otherwise (and under POCKET_MLA_DECODE=576)
	// on the CUDA cores: a block scores 8 heads (a warp each), aiming at 16
	// blocks per SM; on DeepSeek's dims 8·mlaHW heads, aiming at 2 (one is
	// resident at its ~250 registers a thread). Ranges of at least 8
	// positions (mla_tc: whole tiles of 32), ≤ 256 splits.
	f, perBlock, perSM := m.partial, 8, 16
	tc := dk == 576 && dv == 512 && (switches.mlaDecode == "" || switches.mlaDecode == "tc")
	switch {
	case tc:
		f, perBlock, perSM = m.tc, mlaTCHeads, switches.mlaTCWaves
	case dk == 576 && dv == 512 && switches.mlaDecode == "576":
		f, perBlock, perSM = m.partial576, 8*mlaHW, 2
	}
	groups := cdiv(heads, perBlock)
	splits := 1
	if want := cdiv(perSM*b.sms, rows*groups); want > 1 {
		splits = min(want, max(cdiv(listLen, 8), 1), 256)
	}
	chunk := cdiv(listLen, splits)
	if tc {
		chunk = cdiv(chunk, mlaTCTile) * mlaTCTile
		splits = cdiv(listLen, chunk)
	}
	var part cu.DevicePtr
	if splits > 1 {
		part = b.scratch(&m.part, &m.partN, int64(rows*heads*splits)*int64(dv+2)*4)
	}
	shm := 0
	if tc {
		shm = mlaTCShm
	}
	b.launchFnShm(f, rows*groups, splits, 256, shm, ptr(dptr(dst)), ptr(part), ptr(dptr(q)), ptr(p.kLayer(layer)), ptr(tp),
		ptr(st), ptr(sel), ptr(cnt), i32(heads), i32(dk), i32(dv), i32(s.BlockSize), i32(chunk), i32(topk), f32(scale))
	if splits > 1 {
		b.launchFn(m.combine, rows*heads, cdiv(dv, 128), 128, ptr(dptr(dst)), ptr(part), i32(splits), i32(dv))
	}
}

// dsaSelect scores every visible position with the indexer and leaves
// each row's attended positions in device scratch: sel [rows, TopK]
// (ascending) and their counts cnt [rows]. ctx bounds the positions.
func (b *Backend) dsaSelect(m *mlaMod, p *kvPool, layer int, table, start cu.DevicePtr, rows, ctx int, d *kernels.DSA) (sel, cnt cu.DevicePtr) {
	switch {
	case d.Heads < 1 || d.Dim < 1 || d.Dim > maxDSADim || d.Heads*d.Dim > maxDSAQ || d.TopK < 1:
		b.fail(fmt.Errorf("cuda: DSA with %d heads of width %d (width ≤ %d, heads×width ≤ %d), top %d: %w",
			d.Heads, d.Dim, maxDSADim, maxDSAQ, d.TopK, kernels.ErrUnsupported))
		return 0, 0
	case p.spec.HeadDimV != d.Dim:
		b.fail(fmt.Errorf("cuda: DSA keys of width %d, the pool's V rows are %d wide", d.Dim, p.spec.HeadDimV))
		return 0, 0
	}
	// Layout: scores f32 [rows, ctx], marks i32 [rows, ctx], sel i32
	// [rows, TopK], cnt i32 [rows], each part 256-byte aligned.
	al := func(n int64) int64 { return (n + 255) &^ 255 }
	sb := al(int64(rows) * int64(ctx) * 4)
	selB := al(int64(rows) * int64(d.TopK) * 4)
	base := b.scratch(&m.dsa, &m.dsaBytes, 2*sb+selB+al(int64(rows)*4))
	scores, marks := base, base+cu.DevicePtr(sb)
	sel, cnt = marks+cu.DevicePtr(sb), marks+cu.DevicePtr(sb+selB)
	if switches.dsaTC && rows >= dsaTCMinRows && d.Heads <= dsaTCHeads && d.Dim <= dsaTCDim && d.Dim%8 == 0 {
		chunks := cdiv(ctx, dsaTCSpan)
		b.launchFnShm(m.scoresTC, cdiv(rows, dsaTCRows)*chunks, 1, 256, dsaTCShm, ptr(scores), ptr(dptr(d.Q)), ptr(dptr(d.W)),
			ptr(p.vLayer(layer)), ptr(table), ptr(start), i32(rows), i32(d.Heads), i32(d.Dim), i32(p.spec.BlockSize),
			i32(chunks), uint64(ctx), f32(d.Scale), i32(d.TopK))
	} else {
		tiles := cdiv(ctx, 64)
		b.launchFn(m.scores, rows*tiles, 1, 256, ptr(scores), ptr(dptr(d.Q)), ptr(dptr(d.W)), ptr(p.vLayer(layer)), ptr(table),
			ptr(start), i32(rows), i32(d.Heads), i32(d.Dim), i32(p.spec.BlockSize), i32(tiles), uint64(ctx), f32(d.Scale))
	}
	b.launchFn(m.topk, rows, 1, 256, ptr(scores), ptr(marks), ptr(sel), ptr(cnt), ptr(start), i32(rows), uint64(ctx),
		i32(d.TopK))
	return sel, cnt
}
