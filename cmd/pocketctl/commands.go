package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/spf13/cobra"
)

func newStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether pocketd is ready, its models and your sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			h, err := a.client().Health(ctx)
			if err != nil {
				if h.Status != "" && !a.json {
					fmt.Fprintf(a.out, "pocketd: %s\n", h.Status)
					printWorkers(a.out, h.Workers)
				}
				return err
			}
			sess, err := a.client().Sessions(ctx)
			if err != nil {
				return err
			}
			if a.json {
				v := map[string]any{"status": h.Status, "models": h.Models, "sessions": len(sess)}
				if len(h.Workers) > 0 {
					v["workers"] = h.Workers
				}
				return a.printJSON(v)
			}
			fmt.Fprintf(a.out, "pocketd: %s\nmodels: %s\nyour sessions: %d\n", h.Status, strings.Join(h.Models, ", "), len(sess))
			printWorkers(a.out, h.Workers)
			return nil
		},
	}
}

// printWorkers shows the worker processes of the models served by them:
// a line per rank of each model's group, then why a model is not serving.
func printWorkers(w io.Writer, ws []apitype.WorkerHealth) {
	if len(ws) == 0 {
		return
	}
	fmt.Fprintln(w, "workers:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MODEL\tRANK\tPID\tGPU\tDEVICE\tRESTARTS")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, wh := range ws {
		ranks := wh.Ranks
		if len(ranks) == 0 { // an older daemon: rank 0 only
			ranks = []apitype.RankHealth{{PID: wh.PID, Restarts: wh.Restarts}}
		}
		for _, r := range ranks {
			gpu, pid := "-", "-"
			if r.GPU != nil {
				gpu = strconv.Itoa(*r.GPU)
			}
			if r.PID != 0 {
				pid = strconv.Itoa(r.PID)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%d\n", wh.Model, r.Rank, pid, gpu, dash(r.Device), r.Restarts)
		}
	}
	tw.Flush()
	for _, wh := range ws {
		if wh.Error != "" {
			fmt.Fprintf(w, "  %s: %s\n", wh.Model, wh.Error)
		}
	}
}

func newModelsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "models",
		Short: "List the models pocketd serves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := a.client().Models(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(ms)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tARCHITECTURE\tBACKEND\tCONTEXT\tTEXT\tCHAT")
			for _, m := range ms {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%v\t%v\n", m.Name, m.Architecture, m.Backend, m.ContextLength, m.Tokenizer, m.ChatTemplate)
			}
			return tw.Flush()
		},
	}
}

func printSessions(a *app, ss ...apitype.Session) error {
	if a.json {
		if len(ss) == 1 {
			return a.printJSON(ss[0])
		}
		return a.printJSON(ss)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMODEL\tTOKENS\tUPDATED")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.ID, s.Model, s.Tokens, s.Updated.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func newSessionsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sessions",
		Aliases: []string{"session"},
		Short:   "Manage your sessions (ls, new, rm, info)",
	}
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List your sessions",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ss, err := a.client().Sessions(cmd.Context())
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(ss)
			}
			return printSessions(a, ss...)
		},
	}
	var model string
	newc := &cobra.Command{
		Use:   "new",
		Short: "Create a session and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := a.client().NewSession(cmd.Context(), model)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(s)
			}
			fmt.Fprintln(a.out, s.ID)
			return nil
		},
	}
	newc.Flags().StringVarP(&model, "model", "m", "", "model name (default: the only one served)")
	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Delete sessions",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			for _, id := range ids {
				if err := a.client().DeleteSession(cmd.Context(), id); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
			}
			return nil
		},
	}
	var showTokens bool
	info := &cobra.Command{
		Use:   "info ID",
		Short: "Show a session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.client().Session(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !showTokens {
				return printSessions(a, *s)
			}
			toks, err := a.client().Tokens(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"session": s, "tokens": toks})
			}
			if err := printSessions(a, *s); err != nil {
				return err
			}
			fmt.Fprintln(a.out, joinIDs(toks))
			return nil
		},
	}
	info.Flags().BoolVar(&showTokens, "tokens", false, "also print the token ids")
	cmd.AddCommand(ls, newc, rm, info)
	return cmd
}

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}

func parseIDs(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		out = append(out, int32(n))
	}
	if len(out) == 0 {
		return nil, errors.New("no token ids")
	}
	return out, nil
}

func newAppendCmd(a *app) *cobra.Command {
	var tokens, role string
	var noGenPrompt bool
	cmd := &cobra.Command{
		Use:   "append ID [TEXT]",
		Short: "Append text, token ids or a chat message to a session",
		Long: `Append to a session: TEXT (or stdin when TEXT is omitted) as raw text, or
--tokens ids, or with --role a chat message rendered by the model's chat
template (followed by the assistant prompt unless --no-generation-prompt).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in apitype.Append
			switch {
			case tokens != "":
				if len(args) > 1 {
					return errors.New("give TEXT or --tokens, not both")
				}
				ids, err := parseIDs(tokens)
				if err != nil {
					return err
				}
				in.Tokens = ids
			default:
				text := ""
				if len(args) > 1 {
					text = args[1]
				} else {
					b, err := io.ReadAll(cmd.InOrStdin())
					if err != nil {
						return err
					}
					text = string(b)
				}
				if role != "" {
					in.Messages = []apitype.Message{{Role: role, Content: text}}
					if noGenPrompt {
						f := false
						in.AddGenerationPrompt = &f
					}
				} else {
					in.Text = &text
				}
			}
			r, err := a.client().Append(cmd.Context(), args[0], in)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(r)
			}
			fmt.Fprintf(a.out, "tokens: %d (reused %d, prefilled %d)\n", r.Tokens, r.Reused, r.Prefilled)
			return nil
		},
	}
	cmd.Flags().StringVar(&tokens, "tokens", "", "token `IDS` to append, e.g. 1,2,3")
	cmd.Flags().StringVar(&role, "role", "", "append TEXT as a chat message of this `ROLE` (user, system, ...)")
	cmd.Flags().BoolVar(&noGenPrompt, "no-generation-prompt", false, "with --role: do not add the assistant prompt")
	return cmd
}

// sampling flags shared by generate and chat.
type samplingFlags struct {
	maxTokens               int
	temperature, topP, minP float64
	topK                    int
	seed                    uint64
	stop                    []string
	repetitionPenalty       float64
	presence, frequency     float64
	logitBias               map[string]string
	jsonObject              bool
	jsonSchema              string
}

func (s *samplingFlags) add(cmd *cobra.Command, temp float64, maxTokens int) {
	f := cmd.Flags()
	f.IntVarP(&s.maxTokens, "max-tokens", "n", maxTokens, "most tokens to generate")
	f.Float64VarP(&s.temperature, "temperature", "t", temp, "sampling temperature (0: greedy)")
	f.Float64Var(&s.topP, "top-p", 0, "nucleus sampling mass (0: off)")
	f.IntVar(&s.topK, "top-k", 0, "keep the K most likely tokens (0: off)")
	f.Float64Var(&s.minP, "min-p", 0, "drop tokens below this fraction of the top probability (0: off)")
	f.Uint64Var(&s.seed, "seed", 0, "sampling seed (default: random)")
	f.StringArrayVar(&s.stop, "stop", nil, "stop string (repeatable)")
	f.Float64Var(&s.repetitionPenalty, "repetition-penalty", 0, "repetition penalty (0 or 1: off)")
	f.Float64Var(&s.presence, "presence-penalty", 0, "presence penalty")
	f.Float64Var(&s.frequency, "frequency-penalty", 0, "frequency penalty")
	f.StringToStringVar(&s.logitBias, "logit-bias", nil, "bias added to token ids' logits, in [-100, 100] (e.g. 42=-100,7=2.5)")
	f.BoolVar(&s.jsonObject, "json-object", false, "constrain the reply to one JSON object (generation stops when it closes)")
	f.StringVar(&s.jsonSchema, "json-schema", "", "constrain the reply to a value of the JSON schema in this file")
}

func (s *samplingFlags) request(cmd *cobra.Command) (apitype.Generate, error) {
	set := cmd.Flags().Changed
	var schema json.RawMessage
	if s.jsonSchema != "" {
		b, err := os.ReadFile(s.jsonSchema)
		if err != nil {
			return apitype.Generate{}, fmt.Errorf("--json-schema: %w", err)
		}
		if !json.Valid(b) {
			return apitype.Generate{}, fmt.Errorf("--json-schema: %s is not JSON", s.jsonSchema)
		}
		schema = b
	}
	var bias map[string]float64
	for id, v := range s.logitBias {
		b, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return apitype.Generate{}, fmt.Errorf("--logit-bias %s=%s: not a number", id, v)
		}
		if bias == nil {
			bias = map[string]float64{}
		}
		bias[id] = b
	}
	return apitype.Generate{
		MaxTokens: &s.maxTokens, Temperature: &s.temperature, Stop: s.stop,
		TopP:              ifSet(set("top-p"), &s.topP),
		TopK:              ifSet(set("top-k"), &s.topK),
		MinP:              ifSet(set("min-p"), &s.minP),
		Seed:              ifSet(set("seed"), &s.seed),
		RepetitionPenalty: ifSet(set("repetition-penalty"), &s.repetitionPenalty),
		PresencePenalty:   ifSet(set("presence-penalty"), &s.presence),
		FrequencyPenalty:  ifSet(set("frequency-penalty"), &s.frequency),
		LogitBias:         bias,
		JSON:              s.jsonObject,
		JSONSchema:        schema,
	}, nil
}

// ifSet is v when its flag was set, else nil (the daemon's default).
func ifSet[T any](set bool, v *T) *T {
	if set {
		return v
	}
	return nil
}

func newGenerateCmd(a *app) *cobra.Command {
	var sf samplingFlags
	var ids bool
	cmd := &cobra.Command{
		Use:   "generate ID",
		Short: "Generate at the end of a session, streaming the text to the terminal",
		Long: `Generate at the end of a session. The text streams to stdout as it is
generated; the generated tokens join the session. With --json the final
result is printed as JSON instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := sf.request(cmd)
			if err != nil {
				return err
			}
			var onToken func(apitype.Token) error
			if !a.json {
				onToken = func(t apitype.Token) error {
					if ids {
						fmt.Fprintf(a.out, "%d ", t.ID)
						return nil
					}
					_, err := io.WriteString(a.out, t.Text)
					return err
				}
			}
			res, err := a.client().Generate(cmd.Context(), args[0], req, onToken)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(res)
			}
			fmt.Fprintln(a.out)
			fmt.Fprintf(cmd.ErrOrStderr(), "[%s: %d tokens, %d prompt (%d cached)]\n", res.FinishReason,
				res.Usage.CompletionTokens, res.Usage.PromptTokens, res.Usage.CachedTokens)
			return nil
		},
	}
	sf.add(cmd, 1, 256)
	cmd.Flags().BoolVar(&ids, "ids", false, "print token ids instead of text")
	return cmd
}

func newForkCmd(a *app) *cobra.Command {
	var at int
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Copy a session (or its first --at tokens) into a new one; prints the new id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("at") {
				at = -1
			} else if at < 0 {
				return errors.New("--at must not be negative")
			}
			s, err := a.client().Fork(cmd.Context(), args[0], at)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(s)
			}
			fmt.Fprintln(a.out, s.ID)
			return nil
		},
	}
	cmd.Flags().IntVar(&at, "at", 0, "tokens to keep (default: all)")
	return cmd
}

func newTruncateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "truncate ID LENGTH",
		Short: "Cut a session to its first LENGTH tokens",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return fmt.Errorf("LENGTH %q is not a token count", args[1])
			}
			s, err := a.client().Truncate(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			return printSessions(a, *s)
		},
	}
}
