package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Float32s decodes an F32 tensor.
func (t *Tensor) Float32s() ([]float32, error) {
	if t.DType != "F32" {
		return nil, fmt.Errorf("%s: dtype %s, want F32", t.Name, t.DType)
	}
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out, nil
}

// Int32s decodes an I32 or I64 tensor.
func (t *Tensor) Int32s() ([]int32, error) {
	switch t.DType {
	case "I32":
		out := make([]int32, len(t.Data)/4)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
		return out, nil
	case "I64":
		out := make([]int32, len(t.Data)/8)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: dtype %s, want an integer type", t.Name, t.DType)
}

// F32Tensor makes an F32 tensor from values.
func F32Tensor(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: "F32", Shape: shape, Data: b}
}

// I32Tensor makes an I32 tensor from values.
func I32Tensor(name string, shape []int, v []int32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{Name: name, DType: "I32", Shape: shape, Data: b}
}

// Write encodes tensors as one safetensors file, in the given order.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header := map[string]any{}
	if metadata != nil {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range tensors {
		n := int64(len(t.Data))
		header[t.Name] = headerEntry{DType: t.DType, Shape: t.Shape, DataOffsets: []int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces so the data starts 8-byte aligned.
	for (len(h)+8)%8 != 0 {
		h = append(h, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}
