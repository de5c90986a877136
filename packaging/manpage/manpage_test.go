package manpage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func testTree() *cobra.Command {
	root := &cobra.Command{Use: "pocketd", Short: "PocketLLM daemon"}
	serve := &cobra.Command{
		Use:     "serve",
		Short:   "Serve models",
		Long:    "Serve models over a Unix socket.\n\n  indented \\ block\n.not a request",
		Example: "pocketd serve --demo",
		RunE:    func(*cobra.Command, []string) error { return nil },
	}
	serve.Flags().String("config", "/etc/pocketllm/pocketd.toml", "config `FILE`")
	serve.Flags().BoolP("demo", "d", false, "serve the demo model")
	serve.Flags().String("secret", "", "hidden")
	_ = serve.Flags().MarkHidden("secret")
	root.PersistentFlags().String("log-level", "info", "log level")
	root.AddCommand(serve, Command(root))
	root.InitDefaultCompletionCmd()
	return root
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	root := testTree()
	root.SetArgs([]string{"gen-man", dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*"))
	var names []string
	for _, p := range pages {
		names = append(names, filepath.Base(p))
	}
	if got, want := strings.Join(names, " "), "pocketd-serve.1 pocketd.1"; got != want {
		t.Fatalf("pages %q, want %q (no gen-man, completion or help pages)", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pocketd-serve.1"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		".TH \"POCKETD-SERVE\" 1",
		"pocketd\\-serve \\- Serve models",
		"\\fB\\-\\-config\\fR \\fIFILE\\fR\nconfig FILE (default /etc/pocketllm/pocketd.toml)",
		"\\fB\\-d\\fR, \\fB\\-\\-demo\\fR",
		"OPTIONS INHERITED FROM PARENT COMMANDS",
		"indented \\e block",
		"\\&.not a request",
		"\\fBpocketd\\fR(1)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "secret") {
		t.Error("hidden flag documented")
	}
	// groff, when present, must render it without warnings.
	if groff, err := exec.LookPath("groff"); err == nil {
		out, err := exec.Command(groff, "-man", "-ww", "-z", filepath.Join(dir, "pocketd-serve.1")).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("groff: %v\n%s", err, out)
		}
	}
}
