package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/pocketllm/pocketllm/kernels"
)

const (
	headerMin        = 24 // magic, version, tensor count, KV count
	defaultAlignment = 32
	maxDims          = 4 // GGML_MAX_DIMS
	maxKeyLen        = 1 << 16
	maxNameLen       = 1 << 10
	maxStringLen     = 1 << 30
	maxArrayDepth    = 8
	maxElems         = 1 << 50
)

// ValueType is a GGUF metadata value type.
type ValueType uint32

// The metadata value types of the GGUF specification.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
	numValueTypes
)

var valueTypeNames = [numValueTypes]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if t < numValueTypes {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// minSize is the fewest bytes one value of type t occupies.
func (t ValueType) minSize() uint64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeString, TypeUint64, TypeInt64, TypeFloat64:
		return 8
	case TypeArray:
		return 12
	}
	return 1
}

// ggmlTypes maps ggml type ids to DTypes; the ids ggml retired or that no
// kernel handles (Q8_1, Q8_K, integers, F64, TQ*) are rejected.
var ggmlTypes = map[uint32]kernels.DType{
	0: kernels.F32, 1: kernels.F16, 2: kernels.Q4_0, 3: kernels.Q4_1, 6: kernels.Q5_0, 7: kernels.Q5_1,
	8: kernels.Q8_0, 10: kernels.Q2_K, 11: kernels.Q3_K, 12: kernels.Q4_K, 13: kernels.Q5_K, 14: kernels.Q6_K,
	16: kernels.IQ2_XXS, 17: kernels.IQ2_XS, 18: kernels.IQ3_XXS, 19: kernels.IQ1_S, 20: kernels.IQ4_NL,
	21: kernels.IQ3_S, 22: kernels.IQ2_S, 23: kernels.IQ4_XS, 29: kernels.IQ1_M, 30: kernels.BF16,
	39: kernels.MXFP4,
}

var ggmlUnsupported = map[uint32]string{9: "Q8_1", 15: "Q8_K", 24: "I8", 25: "I16", 26: "I32", 27: "I64",
	28: "F64", 34: "TQ1_0", 35: "TQ2_0"}

type header struct {
	version   uint32
	meta      *Metadata
	alignment int
	tensors   []TensorInfo
}

// reader walks a byte slice; every read checks the remaining length and
// records the first error, after which reads return zero values.
type reader struct {
	b   []byte
	off uint64
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrFormat, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) left() uint64 { return uint64(len(r.b)) - r.off }

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > r.left() {
		r.fail("truncated: need %d bytes, %d left", n, r.left())
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() uint8 {
	if s := r.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if s := r.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

func (r *reader) str(limit uint64, what string) string {
	n := r.u64()
	if r.err != nil {
		return ""
	}
	if n > limit || n > r.left() {
		r.fail("%s of %d bytes (%d left in the file)", what, n, r.left())
		return ""
	}
	return string(r.take(n))
}

// count reads an element count and checks that count elements of at least
// minSize bytes each can fit in the rest of the file.
func (r *reader) count(minSize uint64, what string) uint64 {
	n := r.u64()
	if r.err != nil {
		return 0
	}
	if n > r.left()/minSize {
		r.fail("%s count %d cannot fit in the %d bytes left", what, n, r.left())
		return 0
	}
	return n
}

func parse(b []byte) (*header, error) {
	r := &reader{b: b}
	if len(b) < headerMin {
		return nil, fmt.Errorf("%w: %d bytes is too short for a header", ErrFormat, len(b))
	}
	if string(r.take(4)) != "GGUF" {
		return nil, fmt.Errorf("%w: bad magic %q", ErrFormat, b[:4])
	}
	h := &header{version: r.u32(), alignment: defaultAlignment}
	switch {
	case h.version == 2 || h.version == 3:
	case h.version == 1:
		return nil, fmt.Errorf("%w: GGUF v1 is not supported", ErrFormat)
	case h.version&0xffff == 0 && h.version>>16 != 0:
		return nil, fmt.Errorf("%w: big-endian GGUF is not supported", ErrFormat)
	default:
		return nil, fmt.Errorf("%w: unknown version %d", ErrFormat, h.version)
	}
	nTensors := r.u64()
	// Smallest KV: 8-byte key length, 1-byte key, 4-byte type, 1-byte value.
	nKV := r.count(14, "metadata")
	if r.err != nil {
		return nil, r.err
	}
	// Smallest tensor info: name length, 1-byte name, n_dims, one dim, type, offset.
	if nTensors > r.left()/33 {
		return nil, fmt.Errorf("%w: tensor count %d cannot fit in a %d-byte file", ErrFormat, nTensors, len(b))
	}
	h.meta = &Metadata{values: make(map[string]Value, nKV)}
	for i := uint64(0); i < nKV && r.err == nil; i++ {
		key := r.str(maxKeyLen, "metadata key")
		if r.err == nil && key == "" {
			r.fail("empty metadata key")
		}
		typ := ValueType(r.u32())
		v := r.value(typ, 0)
		if r.err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, r.err)
		}
		if _, dup := h.meta.values[key]; dup {
			return nil, fmt.Errorf("%w: metadata key %q appears twice", ErrFormat, key)
		}
		h.meta.values[key] = v
		h.meta.keys = append(h.meta.keys, key)
	}
	if r.err != nil {
		return nil, r.err
	}
	if v, ok := h.meta.values["general.alignment"]; ok {
		a, isU32 := v.v.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 || a > 1<<30 {
			return nil, fmt.Errorf("%w: general.alignment must be a power-of-two uint32, got %s %v", ErrFormat, v.Type, v.v)
		}
		h.alignment = int(a)
	}
	h.tensors = make([]TensorInfo, 0, nTensors)
	rel := make([]uint64, 0, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		t, off, err := r.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		if off%uint64(h.alignment) != 0 {
			return nil, fmt.Errorf("%w: tensor %q: offset %d is not a multiple of the alignment %d", ErrFormat, t.Name, off, h.alignment)
		}
		h.tensors = append(h.tensors, t)
		rel = append(rel, off)
	}
	a := uint64(h.alignment)
	start := (r.off + a - 1) / a * a
	if nTensors > 0 && start > uint64(len(b)) {
		return nil, fmt.Errorf("%w: data section starts at %d, past the end of the %d-byte file", ErrFormat, start, len(b))
	}
	dataLen := uint64(len(b)) - min(start, uint64(len(b)))
	for i := range h.tensors {
		t := &h.tensors[i]
		if rel[i] > dataLen || uint64(t.Bytes) > dataLen-rel[i] {
			return nil, fmt.Errorf("%w: tensor %q: bytes [%d, %d) of the data section lie past its end (%d bytes)",
				ErrFormat, t.Name, rel[i], rel[i]+uint64(t.Bytes), dataLen)
		}
		t.Offset = int64(start + rel[i])
	}
	order := make([]int, len(h.tensors))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return h.tensors[order[i]].Offset < h.tensors[order[j]].Offset })
	for k := 1; k < len(order); k++ {
		p, q := &h.tensors[order[k-1]], &h.tensors[order[k]]
		if p.Offset+p.Bytes > q.Offset {
			return nil, fmt.Errorf("%w: tensors %q and %q overlap", ErrFormat, p.Name, q.Name)
		}
	}
	return h, nil
}

func (r *reader) tensorInfo() (TensorInfo, uint64, error) {
	var t TensorInfo
	t.Name = r.str(maxNameLen, "tensor name")
	nd := r.u32()
	if r.err != nil {
		return t, 0, r.err
	}
	if t.Name == "" {
		return t, 0, fmt.Errorf("%w: empty tensor name", ErrFormat)
	}
	if nd == 0 || nd > maxDims {
		return t, 0, fmt.Errorf("%w: tensor %q has %d dimensions", ErrFormat, t.Name, nd)
	}
	ne := make([]uint64, nd)
	elems := uint64(1)
	for i := range ne {
		ne[i] = r.u64()
		if r.err != nil {
			return t, 0, r.err
		}
		if ne[i] == 0 || ne[i] > maxElems || elems > maxElems/ne[i] {
			return t, 0, fmt.Errorf("%w: tensor %q: bad dimension %d (shape so far %v)", ErrFormat, t.Name, ne[i], ne[:i])
		}
		elems *= ne[i]
	}
	typ := r.u32()
	off := r.u64()
	if r.err != nil {
		return t, 0, r.err
	}
	dt, ok := ggmlTypes[typ]
	if !ok {
		if name, known := ggmlUnsupported[typ]; known {
			return t, 0, fmt.Errorf("%w: tensor %q: ggml type %s is not supported", ErrFormat, t.Name, name)
		}
		return t, 0, fmt.Errorf("%w: tensor %q: unknown ggml type %d", ErrFormat, t.Name, typ)
	}
	t.Type = dt
	be, bb := uint64(dt.BlockElems()), uint64(dt.BlockBytes())
	if ne[0]%be != 0 {
		return t, 0, fmt.Errorf("%w: tensor %q: row of %d elements is not a whole number of %s blocks (%d)", ErrFormat, t.Name, ne[0], dt, be)
	}
	rows := elems / ne[0]
	rowBytes := ne[0] / be * bb
	if rowBytes > math.MaxInt64/rows {
		return t, 0, fmt.Errorf("%w: tensor %q is too large", ErrFormat, t.Name)
	}
	t.Bytes = int64(rowBytes * rows)
	t.Shape = make([]int, nd)
	for i := range ne {
		t.Shape[int(nd)-1-i] = int(ne[i])
	}
	return t, off, nil
}

// value reads one metadata value of type t.
func (r *reader) value(t ValueType, depth int) Value {
	v := Value{Type: t}
	switch t {
	case TypeUint8:
		v.v = r.u8()
	case TypeInt8:
		v.v = int8(r.u8())
	case TypeUint16:
		v.v = r.u16()
	case TypeInt16:
		v.v = int16(r.u16())
	case TypeUint32:
		v.v = r.u32()
	case TypeInt32:
		v.v = int32(r.u32())
	case TypeFloat32:
		v.v = math.Float32frombits(r.u32())
	case TypeBool:
		b := r.u8()
		if b > 1 {
			r.fail("bool value %d", b)
		}
		v.v = b == 1
	case TypeString:
		v.v = r.str(maxStringLen, "string")
	case TypeUint64:
		v.v = r.u64()
	case TypeInt64:
		v.v = int64(r.u64())
	case TypeFloat64:
		v.v = math.Float64frombits(r.u64())
	case TypeArray:
		if depth >= maxArrayDepth {
			r.fail("arrays nested deeper than %d", maxArrayDepth)
			return v
		}
		et := ValueType(r.u32())
		if r.err == nil && et >= numValueTypes {
			r.fail("array of unknown type %d", uint32(et))
		}
		n := r.count(et.minSize(), "array")
		if r.err != nil {
			return v
		}
		v.Elem = et
		v.v = r.array(et, n, depth)
	default:
		r.fail("unknown value type %d", uint32(t))
	}
	return v
}

func readSlice[T any](r *reader, n uint64, get func() T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = get()
	}
	return s
}

func (r *reader) array(et ValueType, n uint64, depth int) any {
	switch et {
	case TypeUint8:
		return append([]uint8(nil), r.take(n)...)
	case TypeInt8:
		return readSlice(r, n, func() int8 { return int8(r.u8()) })
	case TypeUint16:
		return readSlice(r, n, r.u16)
	case TypeInt16:
		return readSlice(r, n, func() int16 { return int16(r.u16()) })
	case TypeUint32:
		return readSlice(r, n, r.u32)
	case TypeInt32:
		return readSlice(r, n, func() int32 { return int32(r.u32()) })
	case TypeFloat32:
		return readSlice(r, n, func() float32 { return math.Float32frombits(r.u32()) })
	case TypeBool:
		return readSlice(r, n, func() bool {
			b := r.u8()
			if b > 1 {
				r.fail("bool value %d", b)
			}
			return b == 1
		})
	case TypeString:
		s := make([]string, n)
		for i := range s {
			if s[i] = r.str(maxStringLen, "string"); r.err != nil {
				return nil
			}
		}
		return s
	case TypeUint64:
		return readSlice(r, n, r.u64)
	case TypeInt64:
		return readSlice(r, n, func() int64 { return int64(r.u64()) })
	case TypeFloat64:
		return readSlice(r, n, func() float64 { return math.Float64frombits(r.u64()) })
	case TypeArray:
		s := make([]Value, n)
		for i := range s {
			if s[i] = r.value(TypeArray, depth+1); r.err != nil {
				return nil
			}
		}
		return s
	}
	return nil
}
