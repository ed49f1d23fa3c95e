package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/msgq/msgq/internal/store"
)

// bulkBatch is how many lines one transaction carries: large enough to
// amortise the commit's fsync, a multiple of the store's statement size.
const bulkBatch = 1024

// lineResult is one line of `send --file` output. Field names are a
// contract (-o json prints one object per line).
type lineResult struct {
	Line       int    `json:"line"`
	Result     string `json:"result"` // enqueued | replayed | invalid | conflict
	Key        string `json:"key,omitempty"`
	ID         string `json:"id,omitempty"`
	State      string `json:"state,omitempty"`
	To         string `json:"to,omitempty"`
	Replayed   bool   `json:"replayed"`
	ExistingID string `json:"existing_id,omitempty"`
	Error      string `json:"error,omitempty"`
}

type bulkCounts struct{ lines, enqueued, replayed, invalid, conflict int }

// bulk is one run of send --file: parse lines, write them in batches, print
// each batch's results in input order once the batch is durable.
type bulk struct {
	a      *app
	st     store.Store
	defs   sendDefaults
	out    *bufio.Writer
	counts bulkCounts
	// the current batch: every line read since the last flush, and the
	// parameters of its good ones.
	lines  []lineResult
	idx    []int // per line: index into params, or -1 for a bad line
	params []store.EnqueueParams
}

func runSendFile(ctx context.Context, a *app, o *sendOptions) error {
	in, size, err := openInput(a, o.file)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	b := &bulk{a: a, st: st, defs: a.sendDefaults(o), out: bufio.NewWriterSize(a.ios.Out, 64<<10)}

	var bar *progressbar.ProgressBar
	if a.ios.ErrTTY {
		bar = progressbar.NewOptions64(size, progressbar.OptionSetWriter(a.ios.Err),
			progressbar.OptionSetDescription("enqueue"), progressbar.OptionShowBytes(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	start := time.Now()
	r := bufio.NewReaderSize(in, 1<<20)
	for n := 1; ; n++ {
		line, rerr := r.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("read %s: %w", o.file, rerr)
		}
		if bar != nil {
			_ = bar.Add(len(line))
		}
		if len(bytes.TrimSpace(line)) > 0 {
			b.add(n, line)
		}
		if len(b.params) >= bulkBatch || (rerr != nil && len(b.lines) > 0) {
			if err := b.flush(ctx); err != nil {
				return err
			}
		}
		if rerr != nil {
			break
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	c := b.counts
	fmt.Fprintf(a.ios.Err, "send: %d lines: %d enqueued, %d replayed, %d invalid, %d conflicts (%.1fs)\n",
		c.lines, c.enqueued, c.replayed, c.invalid, c.conflict, time.Since(start).Seconds())
	switch {
	case c.invalid > 0:
		return &exitError{ExitUsage, fmt.Sprintf("%d of %d lines were invalid and not enqueued (see their results)", c.invalid, c.lines)}
	case c.conflict > 0:
		return &exitError{ExitConflict, fmt.Sprintf("%d of %d lines reuse a key with a different body (see their results)", c.conflict, c.lines)}
	}
	return nil
}

// openInput opens the file (or stdin for "-") and says its size, or -1.
func openInput(a *app, name string) (io.ReadCloser, int64, error) {
	if name == "-" {
		return io.NopCloser(a.ios.In), -1, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, usagef("--file: %v", err)
	}
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, nil
}

// add parses one non-blank line into the current batch.
func (b *bulk) add(n int, line []byte) {
	b.counts.lines++
	var spec sendSpec
	var p store.EnqueueParams
	err := parseLine(line, &spec)
	if err == nil {
		p, err = spec.params(b.a.now(), b.defs)
	}
	if err != nil {
		b.lines = append(b.lines, lineResult{Line: n, Result: "invalid", Key: spec.Key, Error: oneLine(err.Error())})
		b.idx = append(b.idx, -1)
		return
	}
	b.lines = append(b.lines, lineResult{Line: n, Key: p.Key})
	b.idx = append(b.idx, len(b.params))
	b.params = append(b.params, p)
}

// parseLine decodes one JSON object, refusing unknown fields and trailing
// data, so a typo in a field name never silently drops a setting.
func parseLine(line []byte, spec *sendSpec) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(spec); err != nil {
		return usagef("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return usagef("malformed JSON: more than one value on the line")
	}
	return nil
}

// flush writes the batch's good lines in one transaction and prints every
// line's result. Nothing is printed for a batch the store refused.
func (b *bulk) flush(ctx context.Context) error {
	res, err := b.st.MessageEnqueueMany(ctx, b.params)
	if err != nil {
		return fmt.Errorf("enqueue lines %d-%d (nothing of them was written; earlier lines were): %w",
			b.lines[0].Line, b.lines[len(b.lines)-1].Line, err)
	}
	for i := range b.lines {
		lr := &b.lines[i]
		if j := b.idx[i]; j >= 0 {
			r := res[j]
			var ce *store.ConflictError
			switch {
			case errors.As(r.Err, &ce):
				lr.Result, lr.ExistingID, lr.Error = "conflict", ce.ExistingID, r.Err.Error()
			case r.Err != nil:
				lr.Result, lr.Error = "invalid", oneLine(r.Err.Error())
			default:
				lr.ID, lr.State, lr.To, lr.Replayed = r.Message.ID, string(r.Message.State), r.Message.To, r.Replayed
				lr.Result = "enqueued"
				if r.Replayed {
					lr.Result = "replayed"
				}
			}
		}
		switch lr.Result {
		case "enqueued":
			b.counts.enqueued++
		case "replayed":
			b.counts.replayed++
		case "invalid":
			b.counts.invalid++
		case "conflict":
			b.counts.conflict++
		}
		if err := b.print(lr); err != nil {
			return err
		}
	}
	b.lines, b.idx, b.params = b.lines[:0], b.idx[:0], b.params[:0]
	return b.out.Flush()
}

func (b *bulk) print(lr *lineResult) error {
	if b.a.cfg.Output == outJSON {
		buf, _ := json.Marshal(lr)
		buf = append(buf, '\n')
		_, err := b.out.Write(buf)
		return err
	}
	var err error
	switch lr.Result {
	case "enqueued", "replayed":
		_, err = fmt.Fprintf(b.out, "line %d: %s %s %s\n", lr.Line, lr.Result, lr.Key, lr.ID)
	default:
		_, err = fmt.Fprintf(b.out, "line %d: %s: %s\n", lr.Line, lr.Result, lr.Error)
	}
	return err
}
