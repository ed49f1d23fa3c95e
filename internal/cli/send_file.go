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
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"

	"github.com/msgq/msgq/internal/api"
	"github.com/msgq/msgq/internal/queue"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

// bulkBatch is how many lines one transaction carries: large enough to
// amortise the commit's fsync, a multiple of the store's statement size.
const bulkBatch = 4096

// lineResult is one line of `send --file` output. Field names are a
// contract (-o json prints one object per line). A revived line says so
// in Result alone, with no field of its own, so that every other line
// reads as it did before revivals existed.
type lineResult struct {
	Line       int    `json:"line"`
	Result     string `json:"result"` // enqueued | replayed | revived | invalid | conflict
	Key        string `json:"key,omitempty"`
	ID         string `json:"id,omitempty"`
	State      string `json:"state,omitempty"`
	To         string `json:"to,omitempty"`
	Replayed   bool   `json:"replayed"`
	ExistingID string `json:"existing_id,omitempty"`
	Error      string `json:"error,omitempty"`
	// SMS is the text's segment count, for SMS lines with a text.
	SMS *smsInfo `json:"sms,omitempty"`
}

type bulkCounts struct{ lines, enqueued, replayed, revived, invalid, conflict int }

// bulk is one run of send --file. A reader goroutine parses and validates
// lines into batches while the caller writes the previous batch: phone
// number parsing costs about as much CPU as the insert, so overlapping them
// nearly halves the wall time on two cores. Each batch's results are
// printed in input order once the batch is durable.
type bulk struct {
	a      *app
	st     store.Store
	defs   queue.Defaults
	out    *bufio.Writer
	counts bulkCounts
}

// batch is a run of consecutive input lines: every line's result slot, and
// the parameters of its good ones.
type batch struct {
	lines  []lineResult
	idx    []int // per line: index into params, or -1 for a bad line
	params []store.EnqueueParams
	// challenges are the lines with "steps", each written on its own
	// (ChallengeEnqueue) after the batch's single sends.
	challenges []lineChallenge
	read       int64 // bytes of input this batch covers, for the progress bar
	err        error // a read error after these lines
}

func runSendFile(ctx context.Context, a *app, o *sendOptions) error {
	in, size, err := openInput(a, o.file)
	if err != nil {
		return err
	}
	defer in.Close()
	var st store.Store
	if err := a.retryLostConnection(ctx, func() (err error) {
		st, err = a.store(ctx)
		return err
	}); err != nil {
		return storeopen.RedactErr(a.cfg.Store, err)
	}
	b := &bulk{a: a, st: st, defs: a.sendDefaults(o), out: bufio.NewWriterSize(a.ios.Out, 64<<10)}

	var bar *progressbar.ProgressBar
	if a.ios.ErrTTY {
		bar = progressbar.NewOptions64(size, progressbar.OptionSetWriter(a.ios.Err),
			progressbar.OptionSetDescription("enqueue"), progressbar.OptionShowBytes(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionOnCompletion(func() { fmt.Fprintln(a.ios.Err) }))
	}
	start := time.Now()
	batches := make(chan *batch, 2)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.read(ctx, in, batches)
	for bt := range batches {
		if bt.err != nil {
			return fmt.Errorf("--file %s: %w", o.file, bt.err)
		}
		if err := b.flush(ctx, bt); err != nil {
			return err
		}
		if bar != nil {
			_ = bar.Add64(bt.read)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if bar != nil {
		_ = bar.Finish()
	}
	c := b.counts
	// Revivals are rare (a policy refusal whose condition lifted): named
	// only when there are some, so the usual summary stays as it was.
	revived := ""
	if c.revived > 0 {
		revived = fmt.Sprintf(", %d revived", c.revived)
	}
	fmt.Fprintf(a.ios.Err, "send: %d lines: %d enqueued, %d replayed%s, %d invalid, %d conflicts (%.1fs)\n",
		c.lines, c.enqueued, c.replayed, revived, c.invalid, c.conflict, time.Since(start).Seconds())
	switch {
	case c.invalid > 0:
		return &exitError{ExitUsage, fmt.Sprintf("%d of %d lines were invalid and not enqueued (see their results)", c.invalid, c.lines)}
	case c.conflict > 0:
		return &exitError{ExitConflict, fmt.Sprintf("%d of %d lines reuse a key with a different body (see their results)", c.conflict, c.lines)}
	}
	return nil
}

// utf8BOM is the UTF-8 byte-order mark.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// read parses the input into batches of bulkBatch good lines and closes
// out at the end (or when ctx is done).
func (b *bulk) read(ctx context.Context, in io.Reader, out chan<- *batch) {
	defer close(out)
	r := bufio.NewReaderSize(in, 1<<20)
	bt := &batch{}
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			bt.err = err
		}
		bt.read += int64(len(line))
		if n == 1 {
			// A byte-order mark (editors on Windows write one) is not
			// part of the first object.
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			b.add(bt, n, line)
		}
		if len(bt.params) >= bulkBatch || (err != nil && (len(bt.lines) > 0 || bt.err != nil)) {
			select {
			case out <- bt:
			case <-ctx.Done():
				return
			}
			bt = &batch{}
		}
		if err != nil {
			return
		}
	}
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
	fi, err := f.Stat()
	switch {
	case err == nil && fi.IsDir():
		f.Close()
		return nil, 0, usagef("--file: %s is a directory", name)
	case err == nil && fi.Mode().IsRegular():
		size = fi.Size()
	}
	return f, size, nil
}

// add parses one non-blank line into bt.
func (b *bulk) add(bt *batch, n int, line []byte) {
	var spec queue.Spec
	var p store.EnqueueParams
	err := parseLine(line, &spec)
	if err == nil && spec.IsChallenge() {
		var cp store.ChallengeParams
		cp, err = spec.Challenge(b.a.now(), b.defs)
		if err == nil {
			bt.lines = append(bt.lines, lineResult{Line: n, Key: cp.Key})
			bt.idx = append(bt.idx, -1)
			bt.challenges = append(bt.challenges, lineChallenge{len(bt.lines) - 1, cp})
			return
		}
	}
	if err == nil {
		p, err = spec.Admit(b.a.now(), b.defs)
	}
	if err != nil {
		bt.lines = append(bt.lines, lineResult{Line: n, Result: "invalid", Key: spec.Key, Error: oneLine(err.Error())})
		bt.idx = append(bt.idx, -1)
		return
	}
	bt.lines = append(bt.lines, lineResult{Line: n, Key: p.Key})
	bt.idx = append(bt.idx, len(bt.params))
	bt.params = append(bt.params, p)
}

// parseLine decodes one JSON object, refusing unknown fields, trailing
// data and a key given twice, so a typo in a field name never silently
// drops a setting and no setting is silently overridden.
func parseLine(line []byte, spec *queue.Spec) error {
	// Checked on the raw bytes: the JSON decoder would silently turn
	// invalid UTF-8 into U+FFFD, and the customer would get the
	// replacement characters.
	if !utf8.Valid(line) {
		return usagef("not valid UTF-8 (at byte %d of the line)", queue.InvalidUTF8At(line))
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(spec); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field == "":
			return usagef("malformed JSON: a line must be one JSON object, got %s", te.Value)
		case errors.As(err, &te):
			want := "a string"
			if te.Field == "params" {
				want = "an array of strings"
			}
			return usagef("malformed JSON: field %q must be %s, got %s", te.Field, want, te.Value)
		}
		return usagef("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return usagef("malformed JSON: more than one value on the line")
	}
	// As msgq serve refuses it (422 duplicate_key): the decoder kept the
	// last of two values for one key, and which was meant is unknown.
	if path, dup := api.DuplicateKey(line); dup {
		return usagef("duplicate key %q: a key may appear once in an object (keys differing only in case are the same key)", path)
	}
	return nil
}

// flush writes the batch's good lines in one transaction and prints every
// line's result. Nothing is printed for a batch the store refused.
func (b *bulk) flush(ctx context.Context, bt *batch) error {
	if len(bt.lines) == 0 {
		return nil
	}
	// A batch whose connection was lost is written again: lines its lost
	// commit did write come back as replays of their rows.
	var res []store.EnqueueResult
	err := b.a.retryLostConnection(ctx, func() (err error) {
		res, err = b.st.MessageEnqueueMany(ctx, bt.params)
		return err
	})
	if err != nil {
		first, last := bt.lines[0].Line, bt.lines[len(bt.lines)-1].Line
		err = storeopen.RedactErr(b.a.cfg.Store, err)
		if storeopen.ConnectionLost(err) {
			// The commit's answer may be what was lost.
			return fmt.Errorf("enqueue lines %d-%d (they may have been written, earlier lines were; running the file again is safe): %w", first, last, err)
		}
		return fmt.Errorf("enqueue lines %d-%d (nothing of them was written; earlier lines were): %w", first, last, err)
	}
	for _, lc := range bt.challenges {
		lr := &bt.lines[lc.line]
		var res *store.ChallengeResult
		err := b.a.retryLostConnection(ctx, func() (err error) {
			res, err = b.st.ChallengeEnqueue(ctx, &lc.params)
			return err
		})
		var ce *store.ConflictError
		var ie *store.InvalidError
		switch {
		case errors.As(err, &ce):
			lr.Result, lr.ExistingID, lr.Error = "conflict", ce.ExistingID, err.Error()
		case errors.As(err, &ie):
			lr.Result, lr.Error = "invalid", oneLine(err.Error())
		case err != nil:
			return fmt.Errorf("enqueue the challenge of line %d (earlier lines were written): %w", lr.Line, storeopen.RedactErr(b.a.cfg.Store, err))
		default:
			m := res.Challenge.Steps[0].Message
			lr.ID, lr.State, lr.To, lr.Replayed = m.ID, string(m.State), m.To, res.Replayed
			lr.Result = enqueueVerb(res.Replayed, false)
		}
	}
	b.counts.lines += len(bt.lines)
	for i := range bt.lines {
		lr := &bt.lines[i]
		if j := bt.idx[i]; j >= 0 {
			r := res[j]
			var ce *store.ConflictError
			switch {
			case errors.As(r.Err, &ce):
				lr.Result, lr.ExistingID, lr.Error = "conflict", ce.ExistingID, r.Err.Error()
			case r.Err != nil:
				lr.Result, lr.Error = "invalid", oneLine(r.Err.Error())
			default:
				lr.ID, lr.State, lr.To, lr.Replayed = r.Message.ID, string(r.Message.State), r.Message.To, r.Replayed
				lr.SMS = smsCost(r.Message)
				lr.Result = enqueueVerb(r.Replayed, r.Revived)
			}
		}
		switch lr.Result {
		case "enqueued":
			b.counts.enqueued++
		case "replayed":
			b.counts.replayed++
		case "revived":
			b.counts.revived++
		case "invalid":
			b.counts.invalid++
		case "conflict":
			b.counts.conflict++
		}
		if err := b.print(lr); err != nil {
			return err
		}
	}
	return b.out.Flush()
}

// lineChallenge is a --file line that is a challenge: its place in the
// batch's lines and its parameters.
type lineChallenge struct {
	line   int
	params store.ChallengeParams
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
	case "enqueued", "replayed", "revived":
		_, err = fmt.Fprintf(b.out, "line %d: %s %s %s\n", lr.Line, lr.Result, lr.Key, lr.ID)
	default:
		_, err = fmt.Fprintf(b.out, "line %d: %s: %s\n", lr.Line, lr.Result, lr.Error)
	}
	return err
}
