package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models/synth"
)

// writeSynthGGUF writes DIR/model.gguf: a random-weight checkpoint of the
// shape in llama.cpp's names and keys, quantized the way llama.cpp's
// Q4_K_M mix is laid out for a dense model: Q6_K for token_embd, output and
// half of the ffn_down matrices (llama.cpp's use_more_bits layers: the first
// and last eighth and every third in between), Q4_K for every other matrix,
// F32 norms. Blocks are random but valid and sized so that each matrix's
// values have roughly zero mean and the 1/sqrt(fan_in) spread of synth's
// bf16 weights. Every matrix must have a multiple of 256 columns.
//
// Format iq2_xxs makes the layers' matrices IQ2_XXS instead (token_embd
// and output stay Q6_K, as in llama.cpp's IQ2 mixes' head): a speed model
// for the lattice kernels, its blocks random grid indices, signs and
// scales. Format q8_0 makes every matrix Q8_0, as llama.cpp's Q8_0 files
// have them.
func writeSynthGGUF(dir string, s synth.Shape, seed uint64, format string) (int64, error) {
	iq2, q8 := format == "iq2_xxs", format == "q8_0"
	arch := "qwen3"
	if s.Arch == "LlamaForCausalLM" {
		arch = "llama"
	}
	type tensor struct {
		name  string
		shape []int // row-major, outermost first
		dt    kernels.DType
	}
	var ts []tensor
	mat := func(name string, dt kernels.DType, rows, cols int) {
		if iq2 && strings.HasPrefix(name, "blk.") {
			dt = kernels.IQ2_XXS
		}
		if q8 {
			dt = kernels.Q8_0
		}
		ts = append(ts, tensor{name, []int{rows, cols}, dt})
	}
	vec := func(name string, n int) { ts = append(ts, tensor{name, []int{n}, kernels.F32}) }
	mat("token_embd.weight", kernels.Q6_K, s.Vocab, s.Hidden)
	n := s.Layers
	for l := 0; l < n; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		vec(p+"attn_norm.weight", s.Hidden)
		mat(p+"attn_q.weight", kernels.Q4_K, s.Heads*s.HeadDim, s.Hidden)
		mat(p+"attn_k.weight", kernels.Q4_K, s.KVHeads*s.HeadDim, s.Hidden)
		mat(p+"attn_v.weight", kernels.Q4_K, s.KVHeads*s.HeadDim, s.Hidden)
		mat(p+"attn_output.weight", kernels.Q4_K, s.Hidden, s.Heads*s.HeadDim)
		if arch == "qwen3" {
			vec(p+"attn_q_norm.weight", s.HeadDim)
			vec(p+"attn_k_norm.weight", s.HeadDim)
		}
		vec(p+"ffn_norm.weight", s.Hidden)
		mat(p+"ffn_gate.weight", kernels.Q4_K, s.Intermediate, s.Hidden)
		mat(p+"ffn_up.weight", kernels.Q4_K, s.Intermediate, s.Hidden)
		down := kernels.Q4_K
		if l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2 {
			down = kernels.Q6_K
		}
		mat(p+"ffn_down.weight", down, s.Hidden, s.Intermediate)
	}
	vec("output_norm.weight", s.Hidden)
	if !s.Tied {
		mat("output.weight", kernels.Q6_K, s.Vocab, s.Hidden)
	}
	ggmlType := map[kernels.DType]uint32{kernels.F32: 0, kernels.Q8_0: 8, kernels.Q4_K: 12, kernels.Q6_K: 14, kernels.IQ2_XXS: 16}
	fileType := uint32(15) // LLAMA_FTYPE_MOSTLY_Q4_K_M
	if iq2 {
		fileType = 19 // LLAMA_FTYPE_MOSTLY_IQ2_XXS
	} else if q8 {
		fileType = 7 // LLAMA_FTYPE_MOSTLY_Q8_0
	}

	var h bytes.Buffer
	le := func(v any) { _ = binary.Write(&h, binary.LittleEndian, v) }
	str := func(v string) { le(uint64(len(v))); h.WriteString(v) }
	type kv struct {
		key string
		val any
	}
	kvs := []kv{
		{"general.architecture", arch}, {"general.name", "pocket-worker synth " + arch}, {"general.alignment", uint32(32)},
		{"general.file_type", fileType},
		{arch + ".block_count", uint32(s.Layers)}, {arch + ".context_length", uint32(s.MaxPositions)},
		{arch + ".embedding_length", uint32(s.Hidden)}, {arch + ".feed_forward_length", uint32(s.Intermediate)},
		{arch + ".attention.head_count", uint32(s.Heads)}, {arch + ".attention.head_count_kv", uint32(s.KVHeads)},
		{arch + ".attention.key_length", uint32(s.HeadDim)}, {arch + ".attention.value_length", uint32(s.HeadDim)},
		{arch + ".attention.layer_norm_rms_epsilon", float32(1e-6)}, {arch + ".rope.freq_base", float32(s.RopeTheta)},
	}
	h.WriteString("GGUF")
	le(uint32(3))
	le(uint64(len(ts)))
	le(uint64(len(kvs)))
	for _, k := range kvs {
		str(k.key)
		switch v := k.val.(type) {
		case string:
			le(uint32(8))
			str(v)
		case uint32:
			le(uint32(4))
			le(v)
		case float32:
			le(uint32(6))
			le(v)
		}
	}
	var off, total int64
	sizes := make([]int64, len(ts))
	for i, t := range ts {
		rb, err := t.dt.RowBytes(t.shape[len(t.shape)-1])
		if err != nil {
			return 0, fmt.Errorf("%s: %w", t.name, err)
		}
		rows := 1
		for _, d := range t.shape[:len(t.shape)-1] {
			rows *= d
		}
		sizes[i] = int64(rb) * int64(rows)
		str(t.name)
		le(uint32(len(t.shape)))
		for d := len(t.shape) - 1; d >= 0; d-- {
			le(uint64(t.shape[d]))
		}
		le(ggmlType[t.dt])
		le(uint64(off))
		off += (sizes[i] + 31) &^ 31
		total += sizes[i]
	}
	for h.Len()%32 != 0 {
		h.WriteByte(0)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "model.gguf"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := w.Write(h.Bytes()); err != nil {
		return 0, err
	}
	const chunk = 64 << 20
	buf := make([]byte, chunk+256)
	var pad [32]byte
	for i, t := range ts {
		std := 1 / math.Sqrt(float64(t.shape[len(t.shape)-1]))
		bb := int64(t.dt.BlockBytes())
		per := chunk / bb * bb
		for done := int64(0); done < sizes[i]; {
			n := min(sizes[i]-done, per)
			fillSynthBlocks(buf[:n], t.dt, seed^uint64(i+1)<<40, uint64(done/bb), std)
			if _, err := w.Write(buf[:n]); err != nil {
				return 0, err
			}
			done += n
		}
		if _, err := w.Write(pad[:((sizes[i]+31)&^31)-sizes[i]]); err != nil {
			return 0, err
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	return total, f.Close()
}

// fillSynthBlocks fills whole blocks of dt (F32: norm scales 1±0.05) with a
// counter-based generator, in parallel: block k of a tensor depends only on
// (seed, k).
func fillSynthBlocks(b []byte, dt kernels.DType, seed, first uint64, std float64) {
	bb := dt.BlockBytes()
	nb := len(b) / bb
	workers := runtime.GOMAXPROCS(0)
	per := (nb + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < nb; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			for k := lo; k < hi; k++ {
				blk := b[k*bb : (k+1)*bb]
				x := synth.Splitmix(seed + (first+uint64(k))*0x9e3779b97f4a7c15)
				next := func() uint64 { x = synth.Splitmix(x); return x }
				unit := func() float64 { return float64(next()>>11) / (1 << 53) }
				switch dt {
				case kernels.F32:
					binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(1+0.1*(unit()-0.5))))
				case kernels.Q4_K:
					// d, dmin, 12 scale bytes 0x99 (every sub-block: scale =
					// min, 25 or 41), random nibbles: value = d·sc·(q−7.5).
					d := std / (33 * 4.61) * (0.75 + 0.5*unit())
					binary.LittleEndian.PutUint16(blk[0:], f32ToF16bits(float32(d)))
					binary.LittleEndian.PutUint16(blk[2:], f32ToF16bits(float32(7.5*d)))
					for j := 4; j < 16; j++ {
						blk[j] = 0x99
					}
					for j := 16; j < 144; j += 8 {
						binary.LittleEndian.PutUint64(blk[j:], next())
					}
				case kernels.Q8_0:
					// d, 32 random int8 (spread ~73.9): value = d·q.
					d := std / 73.9 * (0.75 + 0.5*unit())
					binary.LittleEndian.PutUint16(blk[0:], f32ToF16bits(float32(d)))
					for j := 2; j < 34; j += 8 {
						binary.LittleEndian.PutUint64(blk[j:], next())
					}
				case kernels.IQ2_XXS:
					// d, then 8 × (4 grid indices, a word of 4×7 sign
					// bits and a 4-bit scale s): value d·(s+0.5)/4·grid,
					// grid values 8..62, whose spread is ~28·d (measured).
					d := std / 28 * (0.75 + 0.5*unit())
					binary.LittleEndian.PutUint16(blk[0:], f32ToF16bits(float32(d)))
					for j := 2; j < 66; j += 8 {
						binary.LittleEndian.PutUint64(blk[j:], next())
					}
				case kernels.Q6_K:
					// ql, qh random; 16 int8 scales in [16, 32); value = d·sc·(q−32).
					for j := 0; j < 192; j += 8 {
						binary.LittleEndian.PutUint64(blk[j:], next())
					}
					r := next()
					for j := 0; j < 16; j++ {
						blk[192+j] = byte(16 + (r>>(4*j))&15)
					}
					d := std / (18.5 * 24) * (0.75 + 0.5*unit())
					binary.LittleEndian.PutUint16(blk[208:], f32ToF16bits(float32(d)))
				}
			}
		}(lo, min(lo+per, nb))
	}
	wg.Wait()
}
