package gcos_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink is a link or image target in Markdown: [text](target) or ![alt](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsAreSelfContained: the README and every document beside it link only to files inside the repository (a
// clone has nothing else), every link resolves, and an anchor names a heading of its file.
func TestDocsAreSelfContained(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, "README.md", "BENCHMARKS.md")
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "../shared") {
			t.Errorf("%s points outside the repository (../shared)", doc)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(b), -1) {
			links++
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				t.Errorf("%s links outside the repository: %s", doc, target)
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			abs, err := filepath.Abs(path)
			if err != nil || !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s: %s leaves the repository", doc, target)
				continue
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: %s does not exist", doc, target)
				continue
			}
			if anchor != "" && !hasHeading(t, path, anchor) {
				t.Errorf("%s: %s names no heading of %s", doc, target, path)
			}
		}
	}
	if links < 10 {
		t.Fatalf("found %d links; the scan is broken", links)
	}
	// The README's test command is the one CI runs.
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	readme, _ := os.ReadFile("README.md")
	if !strings.Contains(string(ci), "./scripts/test") || !strings.Contains(string(readme), "./scripts/test") {
		t.Error("README.md and .ci/run must both name ./scripts/test")
	}
}

// hasHeading reports whether the Markdown file has a heading whose GitHub anchor is anchor.
func hasHeading(t *testing.T, path, anchor string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		title, ok := strings.CutPrefix(strings.TrimSpace(line), "#")
		if !ok {
			continue
		}
		title = strings.TrimSpace(strings.TrimLeft(title, "#"))
		slug := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				return r
			case r >= 'A' && r <= 'Z':
				return r + 'a' - 'A'
			case r == ' ':
				return '-'
			}
			return -1
		}, title)
		if slug == anchor {
			return true
		}
	}
	return false
}
