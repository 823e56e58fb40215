package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The README is a front door: short, with the quick start on its first
// screen (its heading and its commands within the first screenLines lines).
const (
	readmeMaxLines = 200
	screenLines    = 40
)

// moduleFile returns the module's root and the text of the file at name in it.
func moduleFile(t *testing.T, name string) (root, text string) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return root, string(b)
}

func TestReadmeIsAFrontDoor(t *testing.T) {
	root, text := moduleFile(t, "README.md")
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move detail into docs/", len(lines), readmeMaxLines)
	}
	quickStart(t, root) // the section exists and holds the two commands
	// The line that closes the quick start's block of commands.
	end, inSection, inBlock := -1, false, false
	for i, l := range lines {
		switch {
		case l == "## Quick start":
			inSection = true
		case inSection && !inBlock && l == "```sh":
			inBlock = true
		case inBlock && l == "```":
			end = i + 1
		}
		if end > 0 {
			break
		}
	}
	if end < 0 || end > screenLines {
		t.Errorf("the quick start's commands end on line %d of README.md, want them on the first screen (the first %d lines)", end, screenLines)
	}
}

// Versions of the changelog: Keep a Changelog's headings, one line per entry.
var (
	versionHeading = regexp.MustCompile(`^## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?$`)
	groupHeading   = regexp.MustCompile(`^### (Added|Changed|Deprecated|Removed|Fixed|Security)$`)
)

// changelogEntryMax bounds an entry's length in characters: one line, concise.
const changelogEntryMax = 240

func TestChangelogEntriesAreOneLine(t *testing.T) {
	_, text := moduleFile(t, "CHANGELOG.md")
	var versions []string
	groups := map[string]bool{}
	inVersion := false
	for i, l := range strings.Split(text, "\n") {
		n := i + 1
		switch {
		case strings.HasPrefix(l, "## "):
			m := versionHeading.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("CHANGELOG.md:%d: %q is not a version heading (## [Unreleased] or ## [X.Y.Z] - YYYY-MM-DD)", n, l)
				continue
			}
			if (m[1] == "Unreleased") != (m[2] == "") {
				t.Errorf("CHANGELOG.md:%d: %q: a released version has a date, Unreleased none", n, l)
			}
			versions = append(versions, m[1])
			groups = map[string]bool{}
			inVersion = true
		case strings.HasPrefix(l, "### "):
			if !groupHeading.MatchString(l) {
				t.Errorf("CHANGELOG.md:%d: %q is not one of Keep a Changelog's groups", n, l)
			}
			if groups[l] {
				t.Errorf("CHANGELOG.md:%d: %q appears twice in one version", n, l)
			}
			groups[l] = true
		case strings.HasPrefix(l, "- "):
			if !inVersion {
				t.Errorf("CHANGELOG.md:%d: an entry before the first version", n)
			}
			if c := utf8.RuneCountInString(l); c > changelogEntryMax {
				t.Errorf("CHANGELOG.md:%d: an entry of %d characters, want at most %d (details belong in docs/)", n, c, changelogEntryMax)
			}
		case l != "" && unicode.IsSpace(rune(l[0])):
			t.Errorf("CHANGELOG.md:%d: an entry goes on over several lines, want one line each: %q", n, strings.TrimSpace(l))
		}
	}
	if len(versions) < 2 || versions[0] != "Unreleased" {
		t.Errorf("CHANGELOG.md's versions are %q, want [Unreleased] first and at least one released version", versions)
	}
}

// Relative links in the README, the changelog and docs/ name files that
// exist and, with a #fragment, a heading of that file.
var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)|<img [^>]*src="([^"]+)"|^\[[^\]]+\]:\s*(\S+)`)
	fence    = regexp.MustCompile("(?ms)^```.*?^```")
	inline   = regexp.MustCompile("`[^`\n]*`")
	mdHeader = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

func TestDocLinks(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := map[string]bool{}
		for _, m := range mdHeader.FindAllStringSubmatch(fence.ReplaceAllString(string(b), ""), -1) {
			slug := headingSlug(m[1])
			s := slug
			for k := 1; a[s]; k++ {
				s = slug + "-" + strconv.Itoa(k)
			}
			a[s] = true
		}
		anchors[path] = a
		return a
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		text := inline.ReplaceAllString(fence.ReplaceAllString(string(b), ""), "")
		for _, line := range strings.Split(text, "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1] + m[2] + m[3]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: link %q: %v", rel, target, err)
						continue
					}
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
					t.Errorf("%s: link %q: no heading with that anchor", rel, target)
				}
			}
		}
	}
}

// headingSlug is the anchor GitHub gives a heading: lower case, punctuation
// dropped, spaces as hyphens.
func headingSlug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// docSection is the text of the section of markdown under heading (a
// "## " line), up to the next heading of that level.
func docSection(t *testing.T, file, markdown, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(markdown, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", file, heading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestClientDocsListEveryTool: the client set-up lists exactly the tools
// that the server advertises (tools/list of the real binary, sessions on as
// by default), the README's client section names each of them, and every
// configuration example of docs/clients.md is valid JSON.
func TestClientDocsListEveryTool(t *testing.T) {
	t.Parallel()
	cs, _ := connect(t, stdio, serverEnv(t, nil), connectOpts{})
	advertised := map[string]bool{}
	for _, tool := range listTools(t, cs).Tools {
		advertised[tool.Name] = true
	}
	_, clients := moduleFile(t, "docs/clients.md")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(docSection(t, "docs/clients.md", clients, "## What the server offers"), -1) {
		listed[m[1]] = true
	}
	_, readme := moduleFile(t, "README.md")
	readmeClients := docSection(t, "README.md", readme, "## Connecting a client")
	for name := range advertised {
		if !listed[name] {
			t.Errorf("docs/clients.md's table of tools lacks %s, which the server advertises", name)
		}
		if !strings.Contains(readmeClients, "`"+name+"`") {
			t.Errorf("README.md's client section does not name the tool %s", name)
		}
	}
	for name := range listed {
		if !advertised[name] {
			t.Errorf("docs/clients.md lists %s, which the server does not advertise", name)
		}
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(clients, -1)
	if len(blocks) < 5 {
		t.Errorf("docs/clients.md has %d JSON examples, want one per client at least", len(blocks))
	}
	for _, b := range blocks {
		var v map[string]any
		if err := json.Unmarshal([]byte(b[1]), &v); err != nil {
			t.Errorf("docs/clients.md: a JSON example does not parse (%v):\n%s", err, b[1])
		}
	}
}
