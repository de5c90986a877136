package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func encode(t testing.TB, ts []Tensor) []byte {
	var b bytes.Buffer
	if err := Write(&b, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func rawFile(header string, body []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(body))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	return append(append(out, header...), body...)
}

func TestRoundTrip(t *testing.T) {
	data := encode(t, []Tensor{
		F32Tensor("a", []int{2, 2}, []float32{1, 2, 3, 4}),
		I32Tensor("ids", []int{3}, []int32{7, 8, 9}),
	})
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Tensor("a")
	v, err := a.Float32s()
	if err != nil || v[3] != 4 {
		t.Fatalf("a = %v, %v", v, err)
	}
	ids, _ := f.Tensor("ids")
	iv, _ := ids.Int32s()
	if iv[2] != 9 {
		t.Fatalf("ids = %v", iv)
	}
	if f.Metadata["format"] != "pt" {
		t.Fatalf("metadata %v", f.Metadata)
	}
}

func TestRejectsMalformed(t *testing.T) {
	body := make([]byte, 16)
	cases := map[string][]byte{
		"short":          {1, 2, 3},
		"header too big": rawFile(`{}`, nil)[:8],
		"bad json":       rawFile(`{"a":`, body),
		"bad dtype":      rawFile(`{"a":{"dtype":"X9","shape":[2],"data_offsets":[0,2]}}`, body),
		"size mismatch":  rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, body),
		"out of file":    rawFile(`{"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}`, body),
		"negative":       rawFile(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, body),
		"overlap": rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},`+
			`"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, body),
		"offsets arity": rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, body),
		"huge shape":    rawFile(`{"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}}`, body),
	}
	binary.LittleEndian.PutUint64(cases["header too big"], 1<<40)
	for name, data := range cases {
		if _, err := Parse(data); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

func TestOpenFixtureAndTruncated(t *testing.T) {
	src := filepath.Join("..", "testdata", "models", "qwen3")
	c, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Weight("model.norm.weight"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	data, err := os.ReadFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), data[:len(data)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("truncated file: err = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"__metadata__":{"x":"y"},"a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		// Every accepted tensor must lie inside the data it came from.
		for _, name := range file.Names() {
			tt, _ := file.Tensor(name)
			if len(tt.Data) > len(data) {
				t.Fatalf("%s: %d bytes from a %d-byte file", name, len(tt.Data), len(data))
			}
		}
	})
}
