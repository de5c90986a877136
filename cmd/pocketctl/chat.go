package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/pocketllm/pocketllm/client"
	"github.com/pocketllm/pocketllm/client/apitype"
	"github.com/spf13/cobra"
)

// chatStateDir is where chat remembers its session ids:
// $XDG_STATE_HOME/pocketctl, else ~/.local/state/pocketctl.
func chatStateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "pocketctl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "pocketctl"), nil
}

// chatStateFile holds the session id of the chat with model.
func chatStateFile(model string) (string, error) {
	dir, err := chatStateDir()
	if err != nil {
		return "", err
	}
	name := "chat"
	if model != "" {
		name += "-" + strings.Map(func(r rune) rune {
			if r == '/' || r == os.PathSeparator || r < ' ' {
				return '_'
			}
			return r
		}, model)
	}
	return filepath.Join(dir, name+".session"), nil
}

func newChatCmd(a *app) *cobra.Command {
	var sf samplingFlags
	var model, system string
	var fresh bool
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Chat with a model on a persistent session",
		Long: `Chat with a model. Each line you type is appended to the session as a user
message (through the model's chat template) and the reply streams back.

The session is remembered (in $XDG_STATE_HOME/pocketctl, else
~/.local/state/pocketctl), so running chat again resumes the same
conversation, also after pocketd restarts. --new starts a fresh one.
Ctrl-C stops a reply; Ctrl-D (end of input) quits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runChat(cmd, a, &sf, model, system, fresh)
		},
	}
	cmd.Flags().StringVarP(&model, "model", "m", "", "model name (default: the only one served)")
	cmd.Flags().StringVar(&system, "system", "", "system message for a new conversation")
	cmd.Flags().BoolVar(&fresh, "new", false, "start a new conversation")
	sf.add(cmd, 0.7, 512)
	return cmd
}

// chatSession resumes the remembered session or opens a new one.
func chatSession(ctx context.Context, c *client.Client, model string, fresh bool, out io.Writer) (id string, resumed bool, err error) {
	file, err := chatStateFile(model)
	if err != nil {
		return "", false, err
	}
	if !fresh {
		if b, err := os.ReadFile(file); err == nil {
			id := strings.TrimSpace(string(b))
			s, err := c.Session(ctx, id)
			switch {
			case err == nil:
				fmt.Fprintf(out, "resuming session %s (%s, %d tokens)\n", s.ID, s.Model, s.Tokens)
				return s.ID, true, nil
			case errors.Is(err, client.ErrNotFound):
				fmt.Fprintf(out, "session %s is gone; starting a new one\n", id)
			default:
				return "", false, err
			}
		}
	}
	s, err := c.NewSession(ctx, model)
	if err != nil {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return "", false, err
	}
	if err := os.WriteFile(file, []byte(s.ID+"\n"), 0o600); err != nil {
		return "", false, err
	}
	fmt.Fprintf(out, "new session %s (%s)\n", s.ID, s.Model)
	return s.ID, false, nil
}

func runChat(cmd *cobra.Command, a *app, sf *samplingFlags, model, system string, fresh bool) error {
	ctx := cmd.Context()
	req, err := sf.request(cmd)
	if err != nil {
		return err
	}
	c := a.client()
	info := cmd.ErrOrStderr()
	id, resumed, err := chatSession(ctx, c, model, fresh, info)
	if err != nil {
		return err
	}
	stdin := cmd.InOrStdin()
	f, isFile := stdin.(*os.File)
	interactive := isFile && isTerminal(f)
	if system != "" && !resumed {
		f := false
		if _, err := c.Append(ctx, id, apitype.Append{Messages: []apitype.Message{{Role: "system", Content: system}}, AddGenerationPrompt: &f}); err != nil {
			return err
		}
	}
	// Ctrl-C interrupts the reply in progress, not pocketctl.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 64<<10), 4<<20)
	out := cmd.OutOrStdout()
	for {
		if interactive {
			fmt.Fprint(out, "> ")
		}
		lines := make(chan bool, 1)
		go func() { lines <- in.Scan() }()
		var ok bool
		select {
		case ok = <-lines:
		case <-sigs:
			fmt.Fprintln(out)
			return nil
		}
		if !ok {
			if interactive {
				fmt.Fprintln(out)
			}
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		if _, err := c.AppendMessages(ctx, id, apitype.Message{Role: "user", Content: line}); err != nil {
			return err
		}
		gctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sigs:
				cancel()
			case <-gctx.Done():
			}
		}()
		// On a terminal a thinking model's reasoning is dimmed (think.go).
		var ts *thinkStyler
		if of, ok := out.(*os.File); ok && isTerminal(of) {
			ts = &thinkStyler{}
		}
		_, err := c.Generate(gctx, id, req, func(t apitype.Token) error {
			text := t.Text
			if ts != nil {
				text = ts.write(text)
			}
			_, err := io.WriteString(out, text)
			return err
		})
		cancel()
		if ts != nil {
			io.WriteString(out, ts.end())
		}
		fmt.Fprintln(out)
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
