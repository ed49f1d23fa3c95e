// Package rules decides what the stores write: for an enqueue, a
// transition (a takeover included), an evidence application, a claim, an
// ingest (its notices and service windows) and the stats, the new column
// values, the history and attempt rows, and the refusal. It reads no
// database and writes none: each store reads the rows a rule needs,
// calls it, and applies what it returns in its own dialect, so that the
// two stores differ only in SQL text, scanning and transaction handling
// (internal/store/storetest is the judge that they agree; docs/design.md,
// "Two stores, one set of rules").
package rules
