package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/schollz/progressbar/v3"
)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func seconds(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", *p)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func scopeSuffix(scope string) string {
	if scope == "" {
		return ""
	}
	return " scope " + scope
}

// progressFunc draws a progress bar on a terminal (never with --json), else nothing.
func (a *app) progressFunc(what string) func(done, total int64) {
	f, ok := a.stderr.(*os.File)
	if a.jsonOut || !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int64) {
		if bar == nil {
			bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(what),
				progressbar.OptionShowCount(), progressbar.OptionOnCompletion(func() { fmt.Fprintln(f) }))
		}
		_ = bar.Set64(done)
	}
}

// deref is *p, or "-" for nil.
func deref(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

// orEmpty is *p, or "" for nil.
func orEmpty(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
