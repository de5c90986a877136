package gguf

import (
	"math"
	"strconv"
)

// Value is one metadata value. Scalars hold the Go type of their GGUF type
// (uint8 … float64, bool, string); arrays hold a typed slice ([]uint32,
// []string, …) with Elem set, and arrays of arrays hold []Value.
type Value struct {
	Type ValueType
	Elem ValueType // element type when Type is TypeArray
	v    any
}

// Any returns the Go value.
func (v Value) Any() any { return v.v }

// Metadata is the key/value section of a GGUF file.
type Metadata struct {
	keys   []string
	values map[string]Value
}

// Keys lists the keys in file order.
func (m *Metadata) Keys() []string { return m.keys }

// Value returns the raw value of key.
func (m *Metadata) Value(key string) (Value, bool) {
	v, ok := m.values[key]
	return v, ok
}

// String returns a string value.
func (m *Metadata) String(key string) (string, bool) {
	s, ok := m.values[key].v.(string)
	return s, ok
}

// Uint returns an integer value of any integer type that is not negative.
func (m *Metadata) Uint(key string) (uint64, bool) {
	v, ok := m.values[key]
	if !ok {
		return 0, false
	}
	return toUint(v.v)
}

// Int returns an integer value of any integer type that fits an int64.
func (m *Metadata) Int(key string) (int64, bool) {
	v, ok := m.values[key]
	if !ok {
		return 0, false
	}
	switch x := v.v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	u, ok := toUint(v.v)
	if !ok || u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// Float returns a float32 or float64 value (integers are accepted too, as
// writers differ in how they store e.g. rope bases).
func (m *Metadata) Float(key string) (float64, bool) {
	v, ok := m.values[key]
	if !ok {
		return 0, false
	}
	switch x := v.v.(type) {
	case float32:
		// The shortest decimal that rounds to x: 1e-6 stored as float32
		// reads back as 1e-6, not 9.99999997e-07.
		f, err := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return f, err == nil
	case float64:
		return x, true
	}
	if i, ok := m.Int(key); ok {
		return float64(i), true
	}
	return 0, false
}

// Bool returns a bool value.
func (m *Metadata) Bool(key string) (bool, bool) {
	b, ok := m.values[key].v.(bool)
	return b, ok
}

// Strings returns an array of strings.
func (m *Metadata) Strings(key string) ([]string, bool) {
	s, ok := m.values[key].v.([]string)
	return s, ok
}

// Int32s returns an array of any integer type as int32s (values outside
// int32 fail).
func (m *Metadata) Int32s(key string) ([]int32, bool) {
	v, ok := m.values[key]
	if !ok || v.Type != TypeArray {
		return nil, false
	}
	if s, ok := v.v.([]int32); ok {
		return s, true
	}
	var out []int32
	conv := func(x int64) bool {
		if x < math.MinInt32 || x > math.MaxInt32 {
			return false
		}
		out = append(out, int32(x))
		return true
	}
	switch s := v.v.(type) {
	case []uint8:
		for _, x := range s {
			conv(int64(x))
		}
	case []int8:
		for _, x := range s {
			conv(int64(x))
		}
	case []uint16:
		for _, x := range s {
			conv(int64(x))
		}
	case []int16:
		for _, x := range s {
			conv(int64(x))
		}
	case []uint32:
		for _, x := range s {
			if !conv(int64(x)) {
				return nil, false
			}
		}
	case []int64:
		for _, x := range s {
			if !conv(x) {
				return nil, false
			}
		}
	case []uint64:
		for _, x := range s {
			if x > math.MaxInt32 || !conv(int64(x)) {
				return nil, false
			}
		}
	default:
		return nil, false
	}
	return out, true
}

// Float32s returns an array of float32 (or float64, converted).
func (m *Metadata) Float32s(key string) ([]float32, bool) {
	switch s := m.values[key].v.(type) {
	case []float32:
		return s, true
	case []float64:
		out := make([]float32, len(s))
		for i, x := range s {
			out[i] = float32(x)
		}
		return out, true
	}
	return nil, false
}

// Array returns an array value: a typed slice, or []Value for nested
// arrays.
func (m *Metadata) Array(key string) (any, bool) {
	v, ok := m.values[key]
	if !ok || v.Type != TypeArray {
		return nil, false
	}
	return v.v, true
}

func toUint(x any) (uint64, bool) {
	switch x := x.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}
