// Package gguf reads GGUF checkpoints (versions 2 and 3, as llama.cpp and
// ggml write them): the header, typed metadata, tensor infos and a
// read-only memory map of the tensor data, with split files
// (NAME-00001-of-0000N.gguf) joined into one view. Every count, length,
// offset and shape in the header is validated against the file before
// anything is allocated or sliced, so a hostile file yields an error, never
// a panic or an absurd allocation.
//
// On top of the reader it maps llama.cpp's conventions onto the project's:
// Source serves the tensors under transformers names (stacked MoE experts
// become per-expert row slices of the mapped bytes), Config builds a
// models.Config from the {arch}.* keys, and Vocab returns the raw
// tokenizer.ggml.* data for the tokenizer package.
package gguf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pocketllm/pocketllm/kernels"
)

// ErrFormat is wrapped by every error about a malformed or unsupported file.
var ErrFormat = errors.New("invalid GGUF")

// TensorInfo describes one stored tensor.
type TensorInfo struct {
	Name string
	Type kernels.DType
	// Shape is row-major, outermost first: GGUF's ne reversed, so a linear
	// layer is [out, in] and stacked experts are [n_expert, out, in].
	Shape []int
	// Offset is the tensor's absolute byte offset in its file (the data
	// section start plus the stored relative offset); Bytes its size.
	Offset int64
	Bytes  int64
	// Split is the index of the file holding the tensor (0 unless the
	// checkpoint is split).
	Split int
}

// File is an opened GGUF checkpoint (all of its split files).
type File struct {
	// Version is the GGUF version of the (first) file.
	Version  uint32
	Metadata *Metadata
	// Alignment is general.alignment (32 by default).
	Alignment int

	tensors []TensorInfo
	byName  map[string]int
	data    [][]byte // per split: the whole file's bytes (mapped or given)
	unmap   []bool
	paths   []string
}

// Tensors lists the tensors in file order.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Tensor returns the info of the named tensor (GGUF naming).
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// Data returns the mapped bytes of t (valid until Close).
func (f *File) Data(t TensorInfo) []byte {
	return f.data[t.Split][t.Offset : t.Offset+t.Bytes : t.Offset+t.Bytes]
}

// Weight returns the named tensor (GGUF naming) as a kernels.Weight over the
// mapped bytes.
func (f *File) Weight(name string) (*kernels.Weight, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: no tensor %q", name)
	}
	w := &kernels.Weight{Name: name, DType: t.Type, Shape: append([]int(nil), t.Shape...), Data: f.Data(t)}
	return w, w.Validate()
}

// Paths lists the files of the checkpoint (one unless split).
func (f *File) Paths() []string { return f.paths }

// Close unmaps the files; weights and data from f must not be used after.
func (f *File) Close() error {
	var first error
	for i, d := range f.data {
		if f.unmap[i] && d != nil {
			if err := unix.Munmap(d); err != nil && first == nil {
				first = err
			}
		}
		f.data[i] = nil
	}
	return first
}

// Parse reads a GGUF image held in memory (one file; split keys are
// reported in Metadata but not followed). It is the entry point of the
// fuzz target and of tests that build files in memory.
func Parse(data []byte) (*File, error) {
	h, err := parse(data)
	if err != nil {
		return nil, err
	}
	f := newFile(h)
	f.data, f.unmap, f.paths = [][]byte{data}, []bool{false}, []string{""}
	if err := f.addTensors(h, 0); err != nil {
		return nil, err
	}
	return f, nil
}

func newFile(h *header) *File {
	return &File{Version: h.version, Metadata: h.meta, Alignment: h.alignment, byName: map[string]int{}}
}

func (f *File) addTensors(h *header, split int) error {
	for _, t := range h.tensors {
		if _, dup := f.byName[t.Name]; dup {
			return fmt.Errorf("%w: tensor %q appears twice", ErrFormat, t.Name)
		}
		t.Split = split
		f.byName[t.Name] = len(f.tensors)
		f.tensors = append(f.tensors, t)
	}
	return nil
}

var splitName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// Open maps path read-only and parses it. A split checkpoint may be opened
// through any of its files: every part is found by the
// NAME-0000i-of-0000N.gguf naming, checked (split.no, split.count, no
// tensor in two parts) and joined.
func Open(path string) (*File, error) {
	data, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	h, err := parse(data)
	if err != nil {
		_ = unix.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	count, _ := h.meta.Uint("split.count")
	if count <= 1 {
		f := newFile(h)
		f.data, f.unmap, f.paths = [][]byte{data}, []bool{true}, []string{path}
		if err := f.addTensors(h, 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return f, nil
	}
	_ = unix.Munmap(data)
	return openSplit(path, count)
}

func openSplit(path string, count uint64) (*File, error) {
	m := splitName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return nil, fmt.Errorf("%s: %w: split.count is %d but the name is not NAME-00001-of-%05d.gguf", path, ErrFormat, count, count)
	}
	if n, _ := strconv.ParseUint(m[3], 10, 64); n != count {
		return nil, fmt.Errorf("%s: %w: split.count %d disagrees with the file name", path, ErrFormat, count)
	}
	if count > 9999 {
		return nil, fmt.Errorf("%s: %w: split.count %d", path, ErrFormat, count)
	}
	dir := filepath.Dir(path)
	var f *File
	for i := uint64(0); i < count; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%s-%05d-of-%s.gguf", m[1], i+1, m[3]))
		data, err := mapFile(p)
		if err != nil {
			if f != nil {
				f.Close()
			}
			return nil, err
		}
		h, err := parse(data)
		if err == nil {
			err = checkSplit(h, i, count)
		}
		if err == nil && f == nil {
			f = newFile(h)
		}
		if f != nil {
			f.data = append(f.data, data)
			f.unmap = append(f.unmap, true)
			f.paths = append(f.paths, p)
		}
		if err == nil {
			err = f.addTensors(h, int(i))
		}
		if err != nil {
			if f != nil {
				f.Close()
			} else {
				_ = unix.Munmap(data)
			}
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	if total, ok := f.Metadata.Uint("split.tensors.count"); ok && total != uint64(len(f.tensors)) {
		f.Close()
		return nil, fmt.Errorf("%s: %w: split.tensors.count %d but the parts hold %d tensors", path, ErrFormat, total, len(f.tensors))
	}
	return f, nil
}

func checkSplit(h *header, no, count uint64) error {
	c, _ := h.meta.Uint("split.count")
	n, ok := h.meta.Uint("split.no")
	if c != count || !ok || n != no {
		return fmt.Errorf("%w: split.no %d of %d, expected part %d of %d", ErrFormat, n, c, no, count)
	}
	return nil
}

// mapFile maps a whole file read-only.
func mapFile(path string) ([]byte, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	size := st.Size()
	if size < headerMin {
		return nil, fmt.Errorf("%s: %w: %d bytes is too short for a header", path, ErrFormat, size)
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%s: too large to map", path)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return data, nil
}
