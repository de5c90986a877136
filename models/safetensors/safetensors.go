// Package safetensors reads checkpoints in the safetensors format: a single
// model.safetensors or shards listed by model.safetensors.index.json. Files
// are memory-mapped read-only and tensors are returned as views into the
// mapping, so loading a model never copies its weights. Every header is
// validated (size, JSON, dtypes, shapes against byte ranges, ranges inside
// the file and not overlapping) before any tensor is handed out.
package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/models"
)

// maxHeader bounds the JSON header; real checkpoints stay far below it.
const maxHeader = 100 << 20

// ErrFormat marks a malformed file.
var ErrFormat = errors.New("invalid safetensors")

// Tensor describes one entry of a header.
type Tensor struct {
	Name  string
	DType string // as written in the header: "BF16", "F32", "I32", ...
	Shape []int
	Data  []byte
}

// File is one mapped safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	tensors  map[string]*Tensor
	mapped   []byte
}

type headerEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int   `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// weightTypes maps header dtypes to the weight formats kernels consume.
var weightTypes = map[string]kernels.DType{
	"F32": kernels.F32, "F16": kernels.F16, "BF16": kernels.BF16, "F8_E4M3": kernels.F8E4M3,
}

// elemSizes lists every dtype the format defines, with its element size.
var elemSizes = map[string]int64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}

// OpenFile maps and validates one file.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < 8 {
		return nil, fmt.Errorf("%s: %w: file of %d bytes has no header", path, ErrFormat, st.Size())
	}
	if st.Size() > 1<<46 {
		return nil, fmt.Errorf("%s: %w: file too large", path, ErrFormat)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	sf, err := Parse(data)
	if err != nil {
		unix.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf.Path = path
	sf.mapped = data
	return sf, nil
}

// Parse validates a whole safetensors file held in data. The returned
// tensors alias data.
func Parse(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, no header", ErrFormat, len(data))
	}
	var n uint64
	for i := 7; i >= 0; i-- {
		n = n<<8 | uint64(data[i])
	}
	if n > maxHeader || n > uint64(len(data)-8) {
		return nil, fmt.Errorf("%w: header length %d exceeds file (%d bytes)", ErrFormat, n, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	body := data[8+n:]
	f := &File{tensors: make(map[string]*Tensor, len(raw))}
	type span struct {
		lo, hi int64
		name   string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("%w: __metadata__: %v", ErrFormat, err)
			}
			continue
		}
		var e headerEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		size, ok := elemSizes[e.DType]
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q: unsupported dtype %q", ErrFormat, name, e.DType)
		}
		if len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets must have 2 entries", ErrFormat, name)
		}
		lo, hi := e.DataOffsets[0], e.DataOffsets[1]
		if lo < 0 || hi < lo || hi > int64(len(body)) {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d,%d] outside the %d data bytes", ErrFormat, name, lo, hi, len(body))
		}
		elems := int64(1)
		for _, d := range e.Shape {
			if d < 0 || d > 1<<40 {
				return nil, fmt.Errorf("%w: tensor %q: bad shape %v", ErrFormat, name, e.Shape)
			}
			elems *= int64(d)
			if elems > 1<<42 {
				return nil, fmt.Errorf("%w: tensor %q: shape %v too large", ErrFormat, name, e.Shape)
			}
		}
		if want := elems * size; want != hi-lo {
			return nil, fmt.Errorf("%w: tensor %q: shape %v of %s needs %d bytes, data_offsets give %d", ErrFormat, name, e.Shape, e.DType, want, hi-lo)
		}
		f.tensors[name] = &Tensor{Name: name, DType: e.DType, Shape: e.Shape, Data: body[lo:hi:hi]}
		if hi > lo {
			spans = append(spans, span{lo, hi, name})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return nil, fmt.Errorf("%w: tensors %q and %q overlap", ErrFormat, spans[i-1].name, spans[i].name)
		}
	}
	return f, nil
}

// Tensor returns the named tensor.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// Names lists the tensors in sorted order.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.tensors))
	for n := range f.tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Close unmaps the file.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	err := unix.Munmap(f.mapped)
	f.mapped = nil
	return err
}

// Checkpoint is a directory's safetensors weights, possibly sharded. It
// implements models.Source.
type Checkpoint struct {
	files  []*File
	byName map[string]*Tensor
}

var _ models.Source = (*Checkpoint)(nil)

// Open loads dir/model.safetensors.index.json if present, else every
// *.safetensors file in dir (except reference outputs).
func Open(dir string) (*Checkpoint, error) {
	var paths []string
	idx, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	switch {
	case err == nil:
		var index struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(idx, &index); err != nil {
			return nil, fmt.Errorf("%s: model.safetensors.index.json: %w", dir, err)
		}
		seen := map[string]bool{}
		for _, file := range index.WeightMap {
			if file != filepath.Base(file) {
				return nil, fmt.Errorf("%s: index names a file outside the directory: %q", dir, file)
			}
			if !seen[file] {
				seen[file] = true
				paths = append(paths, filepath.Join(dir, file))
			}
		}
		slices.Sort(paths)
	case errors.Is(err, os.ErrNotExist):
		all, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		for _, p := range all {
			if filepath.Base(p) != "reference.safetensors" {
				paths = append(paths, p)
			}
		}
	default:
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no safetensors files", dir)
	}
	c := &Checkpoint{byName: map[string]*Tensor{}}
	for _, p := range paths {
		f, err := OpenFile(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
		for name, t := range f.tensors {
			if _, dup := c.byName[name]; dup {
				c.Close()
				return nil, fmt.Errorf("%s: tensor %q appears in two shards", dir, name)
			}
			c.byName[name] = t
		}
	}
	return c, nil
}

// Weight implements models.Source.
func (c *Checkpoint) Weight(name string) (*kernels.Weight, error) {
	t, ok := c.byName[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, models.ErrMissingTensor)
	}
	dt, ok := weightTypes[t.DType]
	if !ok {
		return nil, fmt.Errorf("%s: dtype %s is not a weight format", name, t.DType)
	}
	return &kernels.Weight{Name: name, DType: dt, Shape: slices.Clone(t.Shape), Data: t.Data}, nil
}

// Names implements models.Source.
func (c *Checkpoint) Names() []string {
	names := make([]string, 0, len(c.byName))
	for n := range c.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Close unmaps every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files = nil
	return errors.Join(errs...)
}
