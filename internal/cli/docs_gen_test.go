package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/reference and docs/man from the command tree")

// The command reference and the man pages are generated from the cobra tree,
// so they cannot drift from --help. This test regenerates them into a
// temporary directory and fails when the committed copies differ; run
//
//	go test ./internal/cli -run TestGeneratedReferenceIsCurrent -update-docs
//
// after changing a command's help.
func TestGeneratedReferenceIsCurrent(t *testing.T) {
	got := t.TempDir()
	generateReference(t, filepath.Join(got, "reference"), filepath.Join(got, "man"))
	for _, sub := range []string{"reference", "man"} {
		want := filepath.Join("..", "..", "docs", sub)
		if *updateDocs {
			if err := os.RemoveAll(want); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(want, os.DirFS(filepath.Join(got, sub))); err != nil {
				t.Fatal(err)
			}
			continue
		}
		gotFiles, wantFiles := readTree(t, filepath.Join(got, sub)), readTree(t, want)
		for name, body := range gotFiles {
			if w, ok := wantFiles[name]; !ok {
				t.Errorf("docs/%s/%s is missing: regenerate with -update-docs", sub, name)
			} else if !bytes.Equal(w, body) {
				t.Errorf("docs/%s/%s is stale: regenerate with -update-docs", sub, name)
			}
		}
		for name := range wantFiles {
			if _, ok := gotFiles[name]; !ok {
				t.Errorf("docs/%s/%s is no longer generated: regenerate with -update-docs", sub, name)
			}
		}
	}
}

func generateReference(t *testing.T, mdDir, manDir string) {
	t.Helper()
	root := newRootCmd(&app{ios: &IOStreams{In: bytes.NewReader(nil), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}, now: time.Now})
	disableAutoGen(root)
	for _, dir := range []string{mdDir, manDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := doc.GenMarkdownTree(root, mdDir); err != nil {
		t.Fatal(err)
	}
	// A fixed date keeps the pages byte-identical from run to run.
	date := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := doc.GenManTree(root, &doc.GenManHeader{Title: "MSGQ", Section: "1", Source: "msgq", Manual: "msgq manual", Date: &date}, manDir); err != nil {
		t.Fatal(err)
	}
}

func disableAutoGen(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		disableAutoGen(sub)
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}
