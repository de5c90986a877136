package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pocketllm/pocketllm/kernels"
	"github.com/pocketllm/pocketllm/kernels/cpu"
	"github.com/pocketllm/pocketllm/models"
	"github.com/pocketllm/pocketllm/models/checkpoint"
)

// inspectReport is what `pocketd inspect --json` prints.
type inspectReport struct {
	Name       string                `json:"name"`
	Format     string                `json:"format"`
	Arch       string                `json:"architecture"`
	Config     *models.Config        `json:"config"`
	Params     int64                 `json:"parameters"`
	Bytes      int64                 `json:"bytes"`
	ByDType    map[string]dtypeTotal `json:"by_dtype"`
	Tensors    int                   `json:"tensors"`
	Valid      bool                  `json:"valid"`
	Supported  bool                  `json:"supported"`
	Missing    []string              `json:"missing,omitempty"`
	Problems   []string              `json:"problems,omitempty"`
	Unexpected []string              `json:"unexpected,omitempty"`
}

type dtypeTotal struct {
	Tensors int   `json:"tensors"`
	Params  int64 `json:"parameters"`
	Bytes   int64 `json:"bytes"`
	// Backends lists the backends whose kernels execute this format.
	Backends []string `json:"backends"`
}

// errInvalid makes inspect exit 1 after printing its report.
var errInvalid = fmt.Errorf("checkpoint is invalid")

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect DIR [--json]",
		Short: "Describe a checkpoint and validate its tensors against the architecture",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ck, err := checkpoint.Open(args[0])
			if err != nil {
				return err
			}
			defer ck.Close()
			r := inspect(ck)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				printInspect(cmd.OutOrStdout(), r)
			}
			if !r.Valid {
				return errInvalid
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func inspect(ck *checkpoint.Checkpoint) *inspectReport {
	r := &inspectReport{Name: ck.Name, Format: ck.Format, Arch: ck.Config.Arch(), Config: ck.Config,
		ByDType: map[string]dtypeTotal{}}
	for _, name := range ck.Source.Names() {
		w, err := ck.Source.Weight(name)
		if err != nil {
			// Non-weight entries (e.g. integer buffers) still count as bytes
			// but have no weight format.
			r.Problems = append(r.Problems, err.Error())
			continue
		}
		t := r.ByDType[w.DType.String()]
		if t.Tensors == 0 {
			t.Backends = []string{}
			for _, b := range kernels.BackendNames() {
				if kernels.Executes(b, w.DType) {
					t.Backends = append(t.Backends, b)
				}
			}
		}
		t.Tensors++
		t.Params += int64(w.Elems())
		t.Bytes += int64(len(w.Data))
		r.ByDType[w.DType.String()] = t
		r.Params += int64(w.Elems())
		r.Bytes += int64(len(w.Data))
		r.Tensors++
	}
	v := models.Validate(ck.Config, ck.Source, cpu.New(1))
	r.Supported = v.Supported
	r.Missing = v.Missing
	r.Problems = append(r.Problems, v.Problems...)
	r.Unexpected = v.Unexpected
	r.Valid = v.OK() && len(r.Problems) == 0
	return r
}

func printInspect(w io.Writer, r *inspectReport) {
	c := r.Config
	fmt.Fprintf(w, "model         %s (%s)\n", r.Name, r.Format)
	fmt.Fprintf(w, "architecture  %s (model_type %s)\n", r.Arch, c.ModelType)
	fmt.Fprintf(w, "layers %d  hidden %d  heads %d/%d kv  head_dim %d  ffn %d  vocab %d  context %d\n",
		c.NumLayers, c.HiddenSize, c.NumHeads, c.NumKVHeads, c.HeadDim, c.IntermediateSize, c.VocabSize, c.MaxPositions)
	if c.NumExperts > 0 {
		fmt.Fprintf(w, "experts %d (top %d, expert ffn %d)\n", c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize)
	}
	fmt.Fprintf(w, "parameters    %d (%.3f B) in %d tensors, %s\n", r.Params, float64(r.Params)/1e9, r.Tensors, human(r.Bytes))
	types := make([]string, 0, len(r.ByDType))
	for k := range r.ByDType {
		types = append(types, k)
	}
	slices.Sort(types)
	for _, k := range types {
		t := r.ByDType[k]
		fmt.Fprintf(w, "  %-8s %5d tensors %14d params %10s   runs on: %s\n", k, t.Tensors, t.Params, human(t.Bytes), strings.Join(t.Backends, ", "))
	}
	for _, m := range r.Missing {
		fmt.Fprintf(w, "missing: %s\n", m)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	for _, u := range r.Unexpected {
		fmt.Fprintf(w, "unexpected: %s\n", u)
	}
	if r.Valid {
		fmt.Fprintln(w, "valid: yes")
	} else {
		fmt.Fprintln(w, "valid: NO")
	}
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
