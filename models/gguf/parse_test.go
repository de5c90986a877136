package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pocketllm/pocketllm/kernels"
)

// builder writes GGUF images for tests.
type builder struct {
	kv      bytes.Buffer
	nkv     int
	infos   bytes.Buffer
	data    bytes.Buffer
	ntensor int
	align   int
}

func le(w *bytes.Buffer, v any) { _ = binary.Write(w, binary.LittleEndian, v) }

func str(w *bytes.Buffer, s string) {
	le(w, uint64(len(s)))
	w.WriteString(s)
}

func (b *builder) add(key string, typ ValueType, val any) *builder {
	str(&b.kv, key)
	le(&b.kv, uint32(typ))
	if s, ok := val.(string); ok {
		str(&b.kv, s)
	} else if s, ok := val.([]string); ok {
		le(&b.kv, uint32(TypeString))
		le(&b.kv, uint64(len(s)))
		for _, x := range s {
			str(&b.kv, x)
		}
	} else if raw, ok := val.([]byte); ok {
		b.kv.Write(raw)
	} else {
		le(&b.kv, val)
	}
	b.nkv++
	return b
}

// tensor appends a tensor with GGUF dims ne (innermost first), ggml type id
// and data.
func (b *builder) tensor(name string, ne []uint64, typ uint32, data []byte) *builder {
	a := b.align
	if a == 0 {
		a = 32
	}
	for b.data.Len()%a != 0 {
		b.data.WriteByte(0)
	}
	str(&b.infos, name)
	le(&b.infos, uint32(len(ne)))
	for _, d := range ne {
		le(&b.infos, d)
	}
	le(&b.infos, typ)
	le(&b.infos, uint64(b.data.Len()))
	b.data.Write(data)
	b.ntensor++
	return b
}

func (b *builder) bytes() []byte {
	var out bytes.Buffer
	out.WriteString("GGUF")
	le(&out, uint32(3))
	le(&out, uint64(b.ntensor))
	le(&out, uint64(b.nkv))
	out.Write(b.kv.Bytes())
	out.Write(b.infos.Bytes())
	a := b.align
	if a == 0 {
		a = 32
	}
	for out.Len()%a != 0 {
		out.WriteByte(0)
	}
	out.Write(b.data.Bytes())
	return out.Bytes()
}

func f32bytes(v ...float32) []byte {
	var w bytes.Buffer
	for _, x := range v {
		le(&w, math.Float32bits(x))
	}
	return w.Bytes()
}

func sample() *builder {
	b := &builder{}
	b.add("general.architecture", TypeString, "qwen3")
	b.add("u8", TypeUint8, uint8(7)).add("i8", TypeInt8, int8(-3)).add("u16", TypeUint16, uint16(65535))
	b.add("i16", TypeInt16, int16(-2)).add("u32", TypeUint32, uint32(1<<31)).add("i32", TypeInt32, int32(-5))
	b.add("f32", TypeFloat32, float32(0.5)).add("bool", TypeBool, uint8(1)).add("u64", TypeUint64, uint64(1<<40))
	b.add("i64", TypeInt64, int64(-1<<40)).add("f64", TypeFloat64, 2.25)
	b.add("strs", TypeArray, []string{"a", "bc", ""})
	var nested bytes.Buffer // [[1,2],[3]] of int32
	le(&nested, uint32(TypeArray))
	le(&nested, uint64(2))
	for _, arr := range [][]int32{{1, 2}, {3}} {
		le(&nested, uint32(TypeInt32))
		le(&nested, uint64(len(arr)))
		le(&nested, arr)
	}
	b.add("nested", TypeArray, nested.Bytes())
	b.tensor("a.weight", []uint64{4, 2}, 0, f32bytes(1, 2, 3, 4, 5, 6, 7, 8))
	b.tensor("b.weight", []uint64{3}, 0, f32bytes(-1, -2, -3))
	return b
}

func TestParseAllValueTypes(t *testing.T) {
	f, err := Parse(sample().bytes())
	if err != nil {
		t.Fatal(err)
	}
	m := f.Metadata
	if v, _ := m.Uint("u8"); v != 7 {
		t.Error("u8", v)
	}
	if v, _ := m.Int("i8"); v != -3 {
		t.Error("i8", v)
	}
	if _, ok := m.Uint("i8"); ok {
		t.Error("negative accepted as uint")
	}
	if v, _ := m.Uint("u16"); v != 65535 {
		t.Error("u16")
	}
	if v, _ := m.Int("i16"); v != -2 {
		t.Error("i16")
	}
	if v, _ := m.Uint("u32"); v != 1<<31 {
		t.Error("u32")
	}
	if v, _ := m.Int("i32"); v != -5 {
		t.Error("i32")
	}
	if v, _ := m.Float("f32"); v != 0.5 {
		t.Error("f32")
	}
	if v, ok := m.Bool("bool"); !v || !ok {
		t.Error("bool")
	}
	if v, _ := m.Uint("u64"); v != 1<<40 {
		t.Error("u64")
	}
	if v, _ := m.Int("i64"); v != -1<<40 {
		t.Error("i64")
	}
	if v, _ := m.Float("f64"); v != 2.25 {
		t.Error("f64")
	}
	if s, _ := m.Strings("strs"); len(s) != 3 || s[1] != "bc" || s[2] != "" {
		t.Error("strings", s)
	}
	if a, ok := m.Array("nested"); !ok || len(a.([]Value)) != 2 || a.([]Value)[0].Any().([]int32)[1] != 2 {
		t.Errorf("nested %v", a)
	}
	if _, ok := m.String("u8"); ok {
		t.Error("typed getter accepted the wrong type")
	}
	ts := f.Tensors()
	if len(ts) != 2 || ts[0].Shape[0] != 2 || ts[0].Shape[1] != 4 || ts[0].Bytes != 32 || ts[1].Shape[0] != 3 {
		t.Fatalf("tensors %+v", ts)
	}
	w, err := f.Weight("a.weight")
	if err != nil || math.Float32frombits(binary.LittleEndian.Uint32(w.Data[20:])) != 6 {
		t.Fatal(w, err)
	}
}

func TestParseRejects(t *testing.T) {
	good := sample().bytes()
	cases := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("GGUX"), good[4:]...),
		"version 1": func() []byte { b := bytes.Clone(good); b[4] = 1; return b }(),
		"version 9": func() []byte { b := bytes.Clone(good); b[4] = 9; return b }(),
		"big endian": func() []byte {
			b := bytes.Clone(good)
			binary.BigEndian.PutUint32(b[4:], 3)
			return b
		}(),
		"huge tensor count": func() []byte {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint64(b[8:], 1<<60)
			return b
		}(),
		"huge kv count": func() []byte {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint64(b[16:], 1<<62)
			return b
		}(),
		"huge string": (&builder{}).add("k", TypeString, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}).bytes(),
		"huge array": (&builder{}).add("k", TypeArray, func() []byte {
			var w bytes.Buffer
			le(&w, uint32(TypeUint64))
			le(&w, uint64(1)<<61)
			return w.Bytes()
		}()).bytes(),
		"unknown value type": (&builder{}).add("k", ValueType(99), uint32(0)).bytes(),
		"bad bool":           (&builder{}).add("k", TypeBool, uint8(2)).bytes(),
		"duplicate key":      (&builder{}).add("k", TypeUint8, uint8(1)).add("k", TypeUint8, uint8(2)).bytes(),
		"bad alignment":      (&builder{}).add("general.alignment", TypeUint32, uint32(3)).bytes(),
		"alignment type":     (&builder{}).add("general.alignment", TypeUint64, uint64(32)).bytes(),
		"unknown ggml type":  (&builder{}).tensor("t", []uint64{4}, 77, make([]byte, 16)).bytes(),
		"int tensor type":    (&builder{}).tensor("t", []uint64{4}, 26, make([]byte, 16)).bytes(),
		"partial block":      (&builder{}).tensor("t", []uint64{33}, 8, make([]byte, 68)).bytes(),
		"zero dim":           (&builder{}).tensor("t", []uint64{4, 0}, 0, nil).bytes(),
		"five dims":          (&builder{}).tensor("t", []uint64{1, 1, 1, 1, 1}, 0, make([]byte, 4)).bytes(),
		"overflowing dims":   (&builder{}).tensor("t", []uint64{1 << 40, 1 << 40}, 0, nil).bytes(),
		"data past end":      (&builder{}).tensor("t", []uint64{64}, 0, make([]byte, 16)).bytes(),
		"duplicate tensor": (&builder{}).tensor("t", []uint64{4}, 0, make([]byte, 16)).
			tensor("t", []uint64{4}, 0, make([]byte, 16)).bytes(),
		"truncated": good[:len(good)-1],
		"deep nesting": (&builder{}).add("k", TypeArray, func() []byte {
			var w bytes.Buffer
			for i := 0; i < 20; i++ {
				le(&w, uint32(TypeArray))
				le(&w, uint64(1))
			}
			le(&w, uint32(TypeUint8))
			le(&w, uint64(0))
			return w.Bytes()
		}()).bytes(),
	}
	// Overlap: two infos pointing at the same bytes.
	ov := &builder{}
	ov.tensor("a", []uint64{8}, 0, make([]byte, 32))
	str(&ov.infos, "b")
	le(&ov.infos, uint32(1))
	le(&ov.infos, uint64(8))
	le(&ov.infos, uint32(0))
	le(&ov.infos, uint64(0))
	ov.ntensor++
	cases["overlap"] = ov.bytes()
	// Misaligned offset.
	mis := &builder{}
	str(&mis.infos, "a")
	le(&mis.infos, uint32(1))
	le(&mis.infos, uint64(1))
	le(&mis.infos, uint32(0))
	le(&mis.infos, uint64(4))
	mis.ntensor++
	mis.data.Write(make([]byte, 64))
	cases["misaligned"] = mis.bytes()

	for name, b := range cases {
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name != "empty" && !errors.Is(err, ErrFormat) {
			t.Errorf("%s: error %v does not wrap ErrFormat", name, err)
		}
	}
	// Every truncation of a valid file fails cleanly.
	for n := 0; n < len(good); n++ {
		if _, err := Parse(good[:n]); err == nil {
			t.Errorf("truncated to %d bytes: accepted", n)
		}
	}
}

func TestSplitFiles(t *testing.T) {
	dir := t.TempDir()
	mk := func(no int, tname string, vals ...float32) {
		b := &builder{}
		if no == 0 {
			b.add("general.architecture", TypeString, "qwen3")
		}
		b.add("split.no", TypeUint16, uint16(no)).add("split.count", TypeUint16, uint16(2))
		b.add("split.tensors.count", TypeInt32, int32(2))
		b.tensor(tname, []uint64{uint64(len(vals))}, 0, f32bytes(vals...))
		name := filepath.Join(dir, "m-0000"+string(rune('1'+no))+"-of-00002.gguf")
		if err := os.WriteFile(name, b.bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(0, "x.weight", 1, 2)
	mk(1, "y.weight", 3, 4, 5)
	for _, p := range []string{"m-00001-of-00002.gguf", "m-00002-of-00002.gguf"} {
		f, err := Open(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Tensors()) != 2 || len(f.Paths()) != 2 {
			t.Fatalf("%s: %d tensors in %d files", p, len(f.Tensors()), len(f.Paths()))
		}
		w, err := f.Weight("y.weight")
		if err != nil || math.Float32frombits(binary.LittleEndian.Uint32(w.Data[8:])) != 5 {
			t.Fatal(w, err)
		}
		if a, _ := f.Metadata.String("general.architecture"); a != "qwen3" {
			t.Error("metadata not from the first part")
		}
		f.Close()
	}
	// A missing part is an error.
	os.Remove(filepath.Join(dir, "m-00002-of-00002.gguf"))
	if _, err := Open(filepath.Join(dir, "m-00001-of-00002.gguf")); err == nil {
		t.Error("missing part accepted")
	}
}

func TestVocab(t *testing.T) {
	f, err := Open(fixture(t, "qwen3-vocab", "vocab.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := f.Vocab()
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 151669 && len(v.Tokens) < 151000 {
		t.Errorf("%d tokens", len(v.Tokens))
	}
	if v.Model != "gpt2" || v.Pre != "qwen2" || v.EOS != 151645 || v.PAD != 151643 || v.BOS != -1 || v.AddBOS {
		t.Errorf("vocab header %q %q eos %d pad %d bos %d", v.Model, v.Pre, v.EOS, v.PAD, v.BOS)
	}
	if len(v.Types) != len(v.Tokens) || len(v.Merges) < 100000 || v.Merges[0] != "Ġ Ġ" {
		t.Errorf("types %d merges %d %q", len(v.Types), len(v.Merges), v.Merges[:1])
	}
	if v.Tokens[v.EOS] != "<|im_end|>" || v.Types[v.EOS] != 3 {
		t.Errorf("eos token %q type %d", v.Tokens[v.EOS], v.Types[v.EOS])
	}
	if !strings.Contains(v.ChatTemplate, "<|im_start|>") {
		t.Error("chat template")
	}
	if _, err := f.Config(); err == nil {
		t.Error("vocab-only file gave a config")
	}
}

func TestUnpermute(t *testing.T) {
	// 2 heads of dim 4: stored rows (llama.cpp order) per head are pairs
	// (0,2),(1,3) interleaved: stored [r0 r2 r1 r3] → want [r0 r1 r2 r3].
	rows := []float32{0, 2, 1, 3, 4, 6, 5, 7}
	w := &kernels.Weight{Name: "q", DType: kernels.F32, Shape: []int{8, 1}, Data: f32bytes(rows...)}
	u, err := unpermute(w, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(u.Data[4*i:])); got != float32(i) {
			t.Fatalf("row %d = %v", i, got)
		}
	}
}

// FuzzParse feeds arbitrary bytes to the parser: it must return an error
// or a File whose tensors all lie inside the data, never panic.
func FuzzParse(f *testing.F) {
	f.Add(sample().bytes())
	f.Add((&builder{}).bytes())
	f.Add((&builder{align: 64}).add("general.alignment", TypeUint32, uint32(64)).
		tensor("t", []uint64{32, 2}, 8, make([]byte, 68)).bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse(data)
		if err != nil {
			return
		}
		for _, ti := range g.Tensors() {
			w, err := g.Weight(ti.Name)
			if err != nil {
				t.Fatalf("%s: %v", ti.Name, err)
			}
			if len(w.Data) != int(ti.Bytes) {
				t.Fatal("size mismatch")
			}
		}
		_, _ = g.Config()
		_, _ = g.Vocab()
		if s, err := g.Source(); err == nil {
			for _, n := range s.Names() {
				_, _ = s.Weight(n)
			}
		}
	})
}
