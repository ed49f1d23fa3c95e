package twilio

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/retry"
)

// TestTheDocsCodeTableIsCodesGo reads the Twilio error-code table in
// docs/providers.md (the "| codes | meaning | class |" table of the Twilio
// section) and fails when it and codes.go disagree: a code in one and not
// the other, or a code with another class.
func TestTheDocsCodeTableIsCodesGo(t *testing.T) {
	f, err := os.Open("../../../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := regexp.MustCompile(`^\d{5}$`)
	doc := map[string]retry.Class{}
	section, table := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			section, table = line == "## Twilio SMS (`twilio`)", false
			continue
		}
		if !section {
			continue
		}
		if line == "| codes | meaning | class |" {
			table = true
			continue
		}
		if !table {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			table = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("docs/providers.md: a row of %d cells: %q", len(cells), line)
		}
		class := retry.Class(strings.TrimSpace(cells[2]))
		for _, c := range strings.Split(cells[0], ",") {
			c = strings.TrimSpace(c)
			if !code.MatchString(c) {
				continue // "---", or a row by status, not by code
			}
			if _, dup := doc[c]; dup {
				t.Errorf("docs/providers.md lists %s twice", c)
			}
			doc[c] = class
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(doc) == 0 {
		t.Fatal("no Twilio code table in docs/providers.md")
	}
	for c, want := range codeClasses {
		got, ok := doc[c]
		switch {
		case !ok:
			t.Errorf("codes.go classifies %s as %s; docs/providers.md does not list it", c, want)
		case got != want:
			t.Errorf("%s: docs/providers.md says %s, codes.go %s", c, got, want)
		}
	}
	for c, got := range doc {
		if _, ok := codeClasses[c]; !ok {
			t.Errorf("docs/providers.md lists %s (%s); codes.go does not", c, got)
		}
	}
}
