package world

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/schollz/progressbar/v3"
)

// progress reports rows loaded: a progress bar on a terminal, one line per phase on any other writer, nothing when
// the writer is nil.
type progress struct {
	bar   *progressbar.ProgressBar
	w     io.Writer
	total int64
	done  atomic.Int64
}

func newProgress(w io.Writer, total int64, what string) *progress {
	p := &progress{w: w, total: total}
	if w == nil {
		return p
	}
	if isTerminal(w) {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionThrottle(100_000_000), // 100 ms
			progressbar.OptionOnCompletion(func() { _, _ = fmt.Fprintln(w) }),
		)
	}
	return p
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// add records n more rows; it is safe for concurrent use.
func (p *progress) add(n int) {
	p.done.Add(int64(n))
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

// phase reports the end of a phase on a non-terminal writer.
func (p *progress) phase(format string, args ...any) {
	if p.w == nil || p.bar != nil {
		return
	}
	_, _ = fmt.Fprintf(p.w, "world: "+format+" (%d/%d rows)\n", append(args, p.done.Load(), p.total)...)
}

// finish completes the bar.
func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// progressStep is how many rows a COPY source streams between two progress reports.
const progressStep = 16384

// ticker batches per-row progress of a COPY source into reports of progressStep rows.
type ticker struct {
	report  func(rows int) // nil for none
	pending int
	closed  bool
}

// tick records one row.
func (t *ticker) tick() {
	t.pending++
	if t.pending == progressStep {
		t.flush()
	}
}

// done reports the rows not yet reported, once.
func (t *ticker) done() {
	if !t.closed {
		t.closed = true
		t.flush()
	}
}

func (t *ticker) flush() {
	if t.report != nil && t.pending > 0 {
		t.report(t.pending)
	}
	t.pending = 0
}
