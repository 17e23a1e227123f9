package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// plainEvery is how often progress is printed as a plain line when the
// error writer is not a terminal.
const plainEvery = 5 * time.Second

// progress returns a progress callback for the app's error writer
// (stderr) and a function to finish it: a redrawn bar when that writer
// is a terminal, else a plain line at the first update, at most every
// plainEvery after, and at the end (a log file gets no carriage returns).
// With --quiet, nothing.
func progress(c *cli.Context, what string) (func(done, total int), func()) {
	if c.Bool("quiet") {
		return nil, func() {}
	}
	w := c.App.ErrWriter
	if isTerminal(w) {
		return barProgress(w, what)
	}
	return plainProgress(w, what, plainEvery, time.Now)
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// barProgress draws a progress bar on w (a terminal).
func barProgress(w io.Writer, what string) (func(done, total int), func()) {
	var bar *progressbar.ProgressBar
	return func(done, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w),
					progressbar.OptionSetDescription(what), progressbar.OptionShowCount(),
					progressbar.OptionShowIts(), progressbar.OptionSetItsString("req"),
					progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30))
			}
			_ = bar.Set(done)
		}, func() {
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(w)
			}
		}
}

// plainProgress writes "what: done/total (p%)" lines to w: at the first
// update, then when every has passed since the last line (clock now), and
// once at the end with the last update's figures. Updates may come from
// one goroutine at a time, as bench's Progress callbacks do.
func plainProgress(w io.Writer, what string, every time.Duration, now func() time.Time) (func(done, total int), func()) {
	var (
		last          time.Time
		done, total   int
		updated, said bool
	)
	line := func() {
		pct := 0
		if total > 0 {
			pct = done * 100 / total
		}
		fmt.Fprintf(w, "%s: %d/%d (%d%%)\n", what, done, total, pct)
		said = true
	}
	return func(d, t int) {
			done, total, updated = d, t, true
			if at := now(); last.IsZero() || at.Sub(last) >= every {
				last = at
				line()
			} else {
				said = false
			}
		}, func() {
			if updated && !said {
				line()
			}
		}
}
