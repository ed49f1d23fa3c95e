package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Output formats every data command accepts with -o.
const (
	outTable = "table"
	outJSON  = "json"
)

// printTable writes a borderless, left-aligned table in the style of
// kubectl and gh: easy to read, easy to grep and cut.
func printTable(w io.Writer, header []string, rows [][]string) error {
	var buf bytes.Buffer
	t := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenRows: tw.Off, BetweenColumns: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.Off},
			},
		})),
		tablewriter.WithConfig(tablewriter.Config{
			Header: tw.CellConfig{
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
				Padding:    tw.CellPadding{Global: tw.Padding{Left: "", Right: "  "}},
			},
			Row: tw.CellConfig{
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Formatting: tw.CellFormatting{AutoWrap: tw.WrapNone},
				Padding:    tw.CellPadding{Global: tw.Padding{Left: "", Right: "  "}},
			},
		}),
	)
	if header != nil {
		hs := make([]any, len(header))
		for i, h := range header {
			hs[i] = h
		}
		t.Header(hs...)
	}
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	// The renderer pads the last column too; trailing blanks only get in
	// the way of diff and grep.
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// printJSON writes v as indented JSON: scripts parse it, people read it.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stamp formats a time for tables: UTC, second precision, RFC 3339.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printRows prints items as a JSON array (never null) or as a table of one
// row per item.
func printRows[T any](a *app, items []T, header []string, row func(*T) []string) error {
	if a.cfg.Output == outJSON {
		if items == nil {
			items = []T{}
		}
		return printJSON(a.ios.Out, items)
	}
	rows := make([][]string, 0, len(items))
	for i := range items {
		rows = append(rows, row(&items[i]))
	}
	return printTable(a.ios.Out, header, rows)
}
