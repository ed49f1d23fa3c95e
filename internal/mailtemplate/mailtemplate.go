// Package mailtemplate renders email content from templates on disk: a
// name and a language give a subject, a text body and an optional HTML
// body, with WhatsApp-style positional parameters {{1}}, {{2}}, ... so one
// `msgq send --template NAME --lang LANG --param ...` works for both
// channels.
//
// # Files
//
// A templates directory holds, per template and language:
//
//	<name>.<lang>.txt    required: "Subject: ..." on the first line, a blank
//	                     line, then the text body
//	<name>.<lang>.html   optional: the HTML alternative
//
// e.g. order_ready.en.txt, order_ready.pt_BR.html. A name is 1-512 of
// a-z, 0-9 and _ (WhatsApp's template name grammar); a language is a tag
// like en, en_US or pt-BR. Files with other extensions, and names starting
// with ".", are ignored.
//
// # Parameters
//
// {{1}} ... {{n}} (spaces inside the braces allowed) are the only
// placeholders: a template uses 1..n with none missing, and a send must
// give exactly n parameters. Any other "{{" is refused at Load, so Go
// template actions cannot be smuggled into a template (and a literal "{{"
// cannot be written: email content does not need one). The subject and
// text take parameters as they are; a parameter with a line break in the
// subject is refused. The HTML body is a Go html/template, so each
// parameter is escaped for where it stands (element text, attribute, URL).
package mailtemplate

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrNotFound is wrapped by the error of a name and language with no template.
var ErrNotFound = errors.New("no such email template")

// ErrParams is wrapped by the error of a parameter count the template does not take.
var ErrParams = errors.New("wrong number of template parameters")

// Template is one name and language.
type Template struct {
	Name, Lang string
	NParams    int // the highest {{n}} used; 1..NParams are all used
	subject    []piece
	text       []piece
	html       *template.Template // nil: no HTML part
}

// piece is literal text, or a parameter when param > 0.
type piece struct {
	lit   string
	param int
}

// Set is the templates of one directory.
type Set struct {
	dir string
	t   map[string]*Template // name + "." + lang
}

var (
	nameRe = regexp.MustCompile(`^[a-z0-9_]{1,512}$`)
	langRe = regexp.MustCompile(`^[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*$`)
	// placeholderRe finds every "{{" ... "}}"; a "{{" it does not find a
	// close for is caught separately.
	placeholderRe = regexp.MustCompile(`\{\{(.*?)\}\}`)
	paramRe       = regexp.MustCompile(`^\s*([1-9][0-9]{0,2})\s*$`)
)

// Load reads every template in dir. It reports every bad file at once,
// each named.
func Load(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("email templates: %w", err)
	}
	s := &Set{dir: dir, t: map[string]*Template{}}
	var errs []error
	htmls := map[string]string{} // key -> file name
	for _, e := range entries {
		fn := e.Name()
		ext := filepath.Ext(fn)
		if e.IsDir() || strings.HasPrefix(fn, ".") || (ext != ".txt" && ext != ".html") {
			continue
		}
		base := strings.TrimSuffix(fn, ext)
		name, lang, ok := strings.Cut(base, ".")
		if !ok || !nameRe.MatchString(name) || !langRe.MatchString(lang) {
			errs = append(errs, fmt.Errorf("email template %s: want <name>.<lang>%s, name of a-z 0-9 _, lang like en or en_US", fn, ext))
			continue
		}
		if ext == ".html" {
			htmls[base] = fn
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, fn))
		if err != nil {
			errs = append(errs, fmt.Errorf("email template %s: %w", fn, err))
			continue
		}
		t, err := parseText(name, lang, string(b))
		if err != nil {
			errs = append(errs, fmt.Errorf("email template %s: %w", fn, err))
			continue
		}
		s.t[base] = t
	}
	keys := make([]string, 0, len(htmls))
	for k := range htmls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fn := htmls[k]
		t, ok := s.t[k]
		if !ok {
			if !textFailed(errs, k) {
				errs = append(errs, fmt.Errorf("email template %s: no %s.txt beside it (the text body and subject are required)", fn, k))
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, fn))
		if err != nil {
			errs = append(errs, fmt.Errorf("email template %s: %w", fn, err))
			continue
		}
		if err := t.parseHTML(string(b)); err != nil {
			errs = append(errs, fmt.Errorf("email template %s: %w", fn, err))
			delete(s.t, k)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// textFailed says the .txt of key was already reported bad.
func textFailed(errs []error, key string) bool {
	for _, e := range errs {
		if strings.HasPrefix(e.Error(), "email template "+key+".txt:") {
			return true
		}
	}
	return false
}

func parseText(name, lang, src string) (*Template, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	first, body, ok := strings.Cut(src, "\n")
	subj, hasSubj := strings.CutPrefix(first, "Subject:")
	if !hasSubj {
		return nil, errors.New(`the first line must be "Subject: ..."`)
	}
	subj = strings.TrimSpace(subj)
	if subj == "" {
		return nil, errors.New("the subject is empty")
	}
	rest, blank := strings.CutPrefix(body, "\n")
	if !ok || !blank {
		return nil, errors.New("a blank line must follow the subject line, then the text body")
	}
	if strings.TrimSpace(rest) == "" {
		return nil, errors.New("the text body is empty")
	}
	t := &Template{Name: name, Lang: lang}
	var err error
	if t.subject, err = pieces(subj); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	if t.text, err = pieces(rest); err != nil {
		return nil, fmt.Errorf("text body: %w", err)
	}
	used := usedParams(t.subject, t.text)
	if err := contiguous(used); err != nil {
		return nil, err
	}
	t.NParams = len(used)
	return t, nil
}

// parseHTML adds the HTML part: its parameters must be among the text's
// (a parameter only the HTML shows would vanish for text-only readers).
func (t *Template) parseHTML(src string) error {
	ps, err := pieces(src)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, p := range ps {
		if p.param == 0 {
			b.WriteString(p.lit)
			continue
		}
		if p.param > t.NParams {
			return fmt.Errorf("uses {{%d}}, and the subject and text use only {{1}}..{{%d}}", p.param, t.NParams)
		}
		fmt.Fprintf(&b, "{{index . %d}}", p.param-1)
	}
	h, err := template.New(t.Name + "." + t.Lang + ".html").Option("missingkey=error").Parse(b.String())
	if err != nil {
		return err
	}
	t.html = h
	return nil
}

// pieces splits src at its placeholders, refusing any "{{" that is not one.
func pieces(src string) ([]piece, error) {
	var out []piece
	last := 0
	for _, m := range placeholderRe.FindAllStringSubmatchIndex(src, -1) {
		inner := src[m[2]:m[3]]
		pm := paramRe.FindStringSubmatch(inner)
		if pm == nil {
			return nil, fmt.Errorf("%q is not a parameter: only {{1}}, {{2}}, ... are allowed", src[m[0]:m[1]])
		}
		n, _ := strconv.Atoi(pm[1])
		if lit := src[last:m[0]]; lit != "" {
			if err := noBraces(lit); err != nil {
				return nil, err
			}
			out = append(out, piece{lit: lit})
		}
		out = append(out, piece{param: n})
		last = m[1]
	}
	if lit := src[last:]; lit != "" {
		if err := noBraces(lit); err != nil {
			return nil, err
		}
		out = append(out, piece{lit: lit})
	}
	return out, nil
}

func noBraces(lit string) error {
	if strings.Contains(lit, "{{") || strings.Contains(lit, "}}") {
		return errors.New(`an unmatched "{{" or "}}": only {{1}}, {{2}}, ... are allowed`)
	}
	return nil
}

func usedParams(lists ...[]piece) []int {
	var used []int
	for _, l := range lists {
		for _, p := range l {
			if p.param > 0 && !slices.Contains(used, p.param) {
				used = append(used, p.param)
			}
		}
	}
	slices.Sort(used)
	return used
}

// contiguous wants used to be 1..n.
func contiguous(used []int) error {
	for i, n := range used {
		if n != i+1 {
			return fmt.Errorf("uses {{%d}} but not {{%d}}: parameters are numbered from 1 without gaps", n, i+1)
		}
	}
	return nil
}

// Get returns the template of name and lang, or an error wrapping
// ErrNotFound that names the languages name has.
func (s *Set) Get(name, lang string) (*Template, error) {
	if t, ok := s.t[name+"."+lang]; ok {
		return t, nil
	}
	var langs []string
	for _, t := range s.t {
		if t.Name == name {
			langs = append(langs, t.Lang)
		}
	}
	if len(langs) == 0 {
		return nil, fmt.Errorf("%w %q in %s", ErrNotFound, name, s.dir)
	}
	slices.Sort(langs)
	return nil, fmt.Errorf("%w %q in language %q in %s (it has %s)", ErrNotFound, name, lang, s.dir, strings.Join(langs, ", "))
}

// Check says whether a send of name in lang with nparams parameters would
// render: the template exists and takes exactly nparams. The error wraps
// ErrNotFound or ErrParams.
func (s *Set) Check(name, lang string, nparams int) error {
	t, err := s.Get(name, lang)
	if err != nil {
		return err
	}
	if nparams != t.NParams {
		return fmt.Errorf("%w: email template %s.%s takes %d parameter(s), got %d", ErrParams, name, lang, t.NParams, nparams)
	}
	return nil
}

// Render fills the template of name and lang with params. html is "" when
// the template has no HTML part.
func (s *Set) Render(name, lang string, params []string) (subject, text, html string, err error) {
	if err := s.Check(name, lang, len(params)); err != nil {
		return "", "", "", err
	}
	t, _ := s.Get(name, lang)
	return t.Render(params)
}

// Render fills t with params (len(params) must be t.NParams).
func (t *Template) Render(params []string) (subject, text, html string, err error) {
	if len(params) != t.NParams {
		return "", "", "", fmt.Errorf("%w: email template %s.%s takes %d parameter(s), got %d", ErrParams, t.Name, t.Lang, t.NParams, len(params))
	}
	for _, p := range t.subject {
		if p.param > 0 && strings.ContainsAny(params[p.param-1], "\r\n") {
			return "", "", "", fmt.Errorf("email template %s.%s: parameter %d has a line break and stands in the subject", t.Name, t.Lang, p.param)
		}
	}
	subject, text = fill(t.subject, params), fill(t.text, params)
	if t.html != nil {
		var b bytes.Buffer
		if err := t.html.Execute(&b, params); err != nil {
			return "", "", "", fmt.Errorf("email template %s.%s: %w", t.Name, t.Lang, err)
		}
		html = b.String()
	}
	return subject, text, html, nil
}

func fill(ps []piece, params []string) string {
	var b strings.Builder
	for _, p := range ps {
		if p.param > 0 {
			b.WriteString(params[p.param-1])
		} else {
			b.WriteString(p.lit)
		}
	}
	return b.String()
}

// Templates lists the set's templates, by name then language.
func (s *Set) Templates() []*Template {
	out := make([]*Template, 0, len(s.t))
	for _, t := range s.t {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Template) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Lang, b.Lang)
	})
	return out
}
