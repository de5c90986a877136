package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestOpenAIGoEmbeddings: /v1/embeddings with the official Go client: one
// unit vector per input, of the model's width, equal for equal inputs;
// token-id inputs; dimensions; and over plain HTTP the base64 encoding,
// mean pooling and the errors.
func TestOpenAIGoEmbeddings(t *testing.T) {
	d := sharedDaemon(t)
	c := goClient(d)
	ctx := context.Background()
	res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "demo",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hello there", "good night", "hello there"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) != 3 || res.Object != "list" || res.Model != "demo" || res.Usage.PromptTokens != 32 || res.Usage.TotalTokens != 32 {
		t.Fatalf("%d embeddings, object %q, model %q, usage %s", len(res.Data), res.Object, res.Model, res.Usage.RawJSON()) // the demo tokenizer: a token a byte
	}
	width := len(res.Data[0].Embedding)
	for i, e := range res.Data {
		if e.Index != int64(i) || e.Object != "embedding" || len(e.Embedding) != width || math.Abs(norm(e.Embedding)-1) > 1e-5 {
			t.Fatalf("embedding %d: index %d, %d values, norm %v", i, e.Index, len(e.Embedding), norm(e.Embedding))
		}
	}
	if width < 16 || !equal(res.Data[0].Embedding, res.Data[2].Embedding) || equal(res.Data[0].Embedding, res.Data[1].Embedding) {
		t.Fatalf("width %d; equal inputs give equal vectors, different ones different", width)
	}
	// Token ids: the same as the text they spell.
	ids, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "demo",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{104, 101, 108, 108, 111, 32, 116, 104, 101, 114, 101}}})
	if err != nil || len(ids.Data) != 1 || !equal(ids.Data[0].Embedding, res.Data[0].Embedding) {
		t.Fatalf("token ids: %v, %d embeddings, not the text's", err, len(ids.Data))
	}
	// Dimensions: the first n values, scaled to unit length.
	short, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "demo", Dimensions: openai.Int(8),
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello there")}})
	if err != nil {
		t.Fatal(err)
	}
	s, full := short.Data[0].Embedding, res.Data[0].Embedding[:8]
	k := norm(full)
	for i := range s {
		if len(s) != 8 || math.Abs(s[i]-full[i]/k) > 1e-5 {
			t.Fatalf("dimensions 8: %v, from %v", s, full) // 8 values each
		}
	}

	// base64: the same float32s, little-endian.
	status, b := postJSON(t, d.tcp, d.base+"/v1/embeddings", map[string]any{"input": "hello there", "encoding_format": "base64"})
	var enc struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	if status != 200 || json.Unmarshal(b, &enc) != nil || len(enc.Data) != 1 {
		t.Fatalf("base64: status %d, %d bytes", status, len(b))
	}
	raw, err := base64.StdEncoding.DecodeString(enc.Data[0].Embedding)
	if err != nil || len(raw) != 4*width {
		t.Fatalf("base64 of %d bytes (%v), want %d", len(raw), err, 4*width)
	}
	for i := range width {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); v != float32(res.Data[0].Embedding[i]) {
			t.Fatalf("base64 value %d: %v, float %v", i, v, res.Data[0].Embedding[i])
		}
	}
	// Mean pooling (pocketd's extension): another unit vector.
	status, b = postJSON(t, d.tcp, d.base+"/v1/embeddings", map[string]any{"input": "hello there", "pooling": "mean"})
	var mean openai.CreateEmbeddingResponse
	if status != 200 || json.Unmarshal(b, &mean) != nil || len(mean.Data) != 1 || math.Abs(norm(mean.Data[0].Embedding)-1) > 1e-5 ||
		equal(mean.Data[0].Embedding, res.Data[0].Embedding) {
		t.Fatalf("mean pooling: status %d, %d bytes", status, len(b))
	}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		param string
	}{
		{"no input", map[string]any{"model": "demo"}, "input"},
		{"empty text", map[string]any{"input": ""}, "input"},
		{"empty list", map[string]any{"input": []string{}}, "input"},
		{"mixed garbage", map[string]any{"input": []any{"a", 3.5}}, "input"},
		{"token outside the vocabulary", map[string]any{"input": []int{1, 1 << 20}}, "input"},
		{"dimensions", map[string]any{"input": "a", "dimensions": 0}, "dimensions"},
		{"too many dimensions", map[string]any{"input": "a", "dimensions": width + 1}, "dimensions"},
		{"encoding", map[string]any{"input": "a", "encoding_format": "hex"}, "encoding_format"},
		{"pooling", map[string]any{"input": "a", "pooling": "max"}, "pooling"},
	} {
		status, b := postJSON(t, d.tcp, d.base+"/v1/embeddings", tc.body)
		if e := checkError(t, status, b, 400); *e.Error.Param != tc.param {
			t.Errorf("%s: param %q, want %q", tc.name, *e.Error.Param, tc.param)
		}
	}
}

func norm(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s)
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
