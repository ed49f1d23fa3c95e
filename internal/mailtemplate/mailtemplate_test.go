package mailtemplate_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/mailtemplate"
)

func dir(t *testing.T, files map[string]string) string {
	t.Helper()
	d := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestRenderTextAndHTML(t *testing.T) {
	d := dir(t, map[string]string{
		"order_ready.en.txt":   "Subject: Order {{1}} is ready\n\nHello {{2}},\norder {{1}} is ready.\n",
		"order_ready.en.html":  `<p>Hello {{ 2 }}, <a href="https://shop.example/o/{{1}}">order {{1}}</a> is ready.</p>`,
		"order_ready.fr.txt":   "Subject: Commande {{1}} prête\r\n\r\nBonjour {{2}}, commande {{1}}.\r\n",
		"welcome.en_US.txt":    "Subject: Welcome\n\nNo parameters here.\n",
		"README.md":            "ignored",
		".order_ready.en.txt~": "ignored",
	})
	s, err := mailtemplate.Load(d)
	if err != nil {
		t.Fatal(err)
	}
	subj, text, html, err := s.Render("order_ready", "en", []string{"A&B<1>", `Ada "the" <script>`})
	if err != nil {
		t.Fatal(err)
	}
	if subj != "Order A&B<1> is ready" {
		t.Errorf("subject %q", subj)
	}
	if text != "Hello Ada \"the\" <script>,\norder A&B<1> is ready.\n" {
		t.Errorf("text %q", text)
	}
	want := `<p>Hello Ada &#34;the&#34; &lt;script&gt;, <a href="https://shop.example/o/A&amp;B%3c1%3e">order A&amp;B&lt;1&gt;</a> is ready.</p>`
	if html != want {
		t.Errorf("html\n got %s\nwant %s", html, want)
	}
	subj, text, html, err = s.Render("order_ready", "fr", []string{"42", "Zoé"})
	if err != nil || subj != "Commande 42 prête" || text != "Bonjour Zoé, commande 42.\n" || html != "" {
		t.Errorf("fr: %q %q %q %v", subj, text, html, err)
	}
	if _, _, _, err := s.Render("welcome", "en_US", nil); err != nil {
		t.Error(err)
	}
	if n := len(s.Templates()); n != 3 {
		t.Errorf("%d templates, want 3", n)
	}
}

func TestCheckErrors(t *testing.T) {
	s, err := mailtemplate.Load(dir(t, map[string]string{
		"order_ready.en.txt": "Subject: Order {{1}}\n\nHi {{2}}\n",
		"order_ready.fr.txt": "Subject: Commande {{1}}\n\nSalut {{2}}\n",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, lang string
		n          int
		is         error
		msg        string
	}{
		{"order_ready", "en", 2, nil, ""},
		{"order_ready", "en", 1, mailtemplate.ErrParams, "takes 2 parameter(s), got 1"},
		{"order_ready", "en", 3, mailtemplate.ErrParams, "takes 2 parameter(s), got 3"},
		{"order_ready", "de", 2, mailtemplate.ErrNotFound, `in language "de"`},
		{"order_ready", "de", 2, mailtemplate.ErrNotFound, "(it has en, fr)"},
		{"shipped", "en", 0, mailtemplate.ErrNotFound, `"shipped"`},
	} {
		err := s.Check(tc.name, tc.lang, tc.n)
		if tc.is == nil {
			if err != nil {
				t.Errorf("Check(%s, %s, %d) = %v", tc.name, tc.lang, tc.n, err)
			}
			continue
		}
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Check(%s, %s, %d) = %v, want one line wrapping %v containing %q", tc.name, tc.lang, tc.n, err, tc.is, tc.msg)
		}
	}
	if _, _, _, err := s.Render("order_ready", "en", []string{"1\r\nBcc: eve@example.com", "x"}); err == nil ||
		!strings.Contains(err.Error(), "line break") {
		t.Errorf("a line break into the subject: %v", err)
	}
}

func TestLoadRefusesBadTemplates(t *testing.T) {
	for _, tc := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"a.en.txt": "Hello\n\nbody"}, `first line must be "Subject: ..."`},
		{map[string]string{"a.en.txt": "Subject: \n\nbody"}, "subject is empty"},
		{map[string]string{"a.en.txt": "Subject: x\nbody"}, "blank line"},
		{map[string]string{"a.en.txt": "Subject: x\n\n  \n"}, "text body is empty"},
		{map[string]string{"a.en.txt": "Subject: x\n\n{{.Secret}}"}, `"{{.Secret}}" is not a parameter`},
		{map[string]string{"a.en.txt": "Subject: x\n\n{{1}} and {{3}}"}, "uses {{3}} but not {{2}}"},
		{map[string]string{"a.en.txt": "Subject: x\n\n{{1}"}, "unmatched"},
		{map[string]string{"a.en.txt": "Subject: x\n\n{{1}}", "a.en.html": "<p>{{2}}</p>"}, "uses {{2}}, and the subject and text use only {{1}}..{{1}}"},
		{map[string]string{"a.en.html": "<p>x</p>"}, "no a.en.txt beside it"},
		{map[string]string{"Order.en.txt": "Subject: x\n\ny"}, "want <name>.<lang>.txt"},
		{map[string]string{"order.txt": "Subject: x\n\ny"}, "want <name>.<lang>.txt"},
	} {
		_, err := mailtemplate.Load(dir(t, tc.files))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%v) = %v, want %q", tc.files, err, tc.want)
		}
	}
	if _, err := mailtemplate.Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Load of a missing directory succeeded")
	}
	// Every bad file is reported in one go.
	_, err := mailtemplate.Load(dir(t, map[string]string{"a.en.txt": "x", "b.en.txt": "y"}))
	if err == nil || !strings.Contains(err.Error(), "a.en.txt") || !strings.Contains(err.Error(), "b.en.txt") {
		t.Errorf("Load = %v, want both files named", err)
	}
}
