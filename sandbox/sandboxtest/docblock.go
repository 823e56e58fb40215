package sandboxtest

import (
	"os"
	"strings"
	"testing"
)

// CheckDocBlock keeps the generated block of a documentation page in step
// with the code: the text of doc between the lines begin and end must be
// want. With update, it rewrites the block instead of failing; regenerate
// is the command that does so, for the failure message.
func CheckDocBlock(t *testing.T, doc, begin, end, want string, update bool, regenerate string) {
	t.Helper()
	page, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q ... %q", doc, begin, end)
	}
	if s[i+len(begin):j] == want {
		return
	}
	if update {
		if err := os.WriteFile(doc, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date: run %s\nwant:\n%s", doc, regenerate, want)
}
