package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// backendFor returns the in-process backend for a name. Only the CPU runs
// inside pocketd; GPU work belongs to worker processes.
func backendFor(name string, threads int) (kernels.Backend, error) {
	switch name {
	case "", "cpu":
		return cpu.New(threads), nil
	case "cuda":
		return nil, fmt.Errorf("backend cuda: this command runs in-process on the CPU; use pocket-worker (built with -tags cuda) on a GPU host")
	}
	return nil, fmt.Errorf("unknown backend %q (cpu or cuda)", name)
}

// loadModel opens a checkpoint and builds it on the named backend.
func loadModel(path, backend string, threads int) (*checkpoint.Checkpoint, *models.Model, error) {
	if path == "" {
		return nil, nil, fmt.Errorf("--model is required")
	}
	be, err := backendFor(backend, threads)
	if err != nil {
		return nil, nil, err
	}
	ck, err := checkpoint.Open(path)
	if err != nil {
		return nil, nil, err
	}
	m, err := ck.Model(be)
	if err != nil {
		ck.Close()
		return nil, nil, err
	}
	return ck, m, nil
}

// parseIDs parses "1,2,3".
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad token id %q", f)
		}
		ids = append(ids, int32(v))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no token ids")
	}
	return ids, nil
}
