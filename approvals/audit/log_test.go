package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/approvals"
)

// writeLog appends n entries to a fresh log and returns its path and lines.
func writeLog(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := l.Append(Entry{Event: EventRequest, ID: "req" + string(rune('a'+i)), Language: "python", Code: "print(<i>)"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	return path, lines[:len(lines)-1]
}

func TestAuditIntactVerifies(t *testing.T) {
	t.Parallel()
	path, lines := writeLog(t, 4)
	sum, err := VerifyFile(path)
	if err != nil {
		t.Fatalf("intact log: %v", err)
	}
	if sum.Entries != 4 || len(sum.LastHash) != 64 {
		t.Fatalf("summary = %+v, want 4 entries and a hash", sum)
	}
	if !bytes.Contains(lines[3], []byte(sum.LastHash)) {
		t.Fatalf("last hash %s is not the last line's", sum.LastHash)
	}

	// Reopening continues the chain.
	l, err := Open(path)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	if err := l.Append(Entry{Event: EventDecision, ID: "reqa", Outcome: approvals.OutcomeApproved, By: "alice", Via: approvals.ViaConsole}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if sum, err := VerifyFile(path); err != nil || sum.Entries != 5 {
		t.Fatalf("after reopening: %+v, %v", sum, err)
	}

	// An empty log verifies.
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, nil, 0o600)
	if sum, err := VerifyFile(empty); err != nil || sum.Entries != 0 {
		t.Fatalf("empty log: %+v, %v", sum, err)
	}
}

func TestAuditTamperedFails(t *testing.T) {
	t.Parallel()
	_, lines := writeLog(t, 4)
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, nil) }
	changed := bytes.Replace(lines[1], []byte(`print(\u003ci\u003e)`), []byte(`print(666)`), 1)
	if bytes.Equal(changed, lines[1]) {
		t.Fatalf("test setup: nothing to change in %s", lines[1])
	}
	outcome := bytes.Replace(lines[2], []byte(`"event":"request"`), []byte(`"event":"decision"`), 1)
	cases := []struct {
		name string
		log  []byte
		want string
	}{
		{"changed", join(lines[0], changed, lines[2], lines[3]), "line 2 was changed"},
		{"changed field", join(lines[0], lines[1], outcome, lines[3]), "line 3 was changed"},
		{"removed", join(lines[0], lines[2], lines[3]), "line 2"},
		{"removed first", join(lines[1], lines[2], lines[3]), "line 1"},
		{"reordered", join(lines[0], lines[2], lines[1], lines[3]), "line 2"},
		{"duplicated", join(lines[0], lines[1], lines[1], lines[2]), "line 3"},
		{"cut mid-line", join(lines[0], lines[1][:len(lines[1])/2]), "line 2 is incomplete"},
		{"hash removed", join(lines[0], bytes.Replace(lines[1], []byte(`,"hash"`), []byte(`,"hsah"`), 1)), "no hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Verify(bytes.NewReader(c.log))
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("Verify = %v, want ErrTampered", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Verify error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestOpenRefusesTamperedLog(t *testing.T) {
	t.Parallel()
	path, lines := writeLog(t, 3)
	os.WriteFile(path, bytes.Join([][]byte{lines[0], lines[2]}, nil), 0o600)
	if _, err := Open(path); err == nil || !errors.Is(err, ErrTampered) {
		t.Fatalf("Open on a tampered log = %v, want ErrTampered", err)
	}
}

// TestLogWithoutFile: a Log opened without a path writes no file but keeps
// what Recent reports.
func TestLogWithoutFile(t *testing.T) {
	t.Parallel()
	l, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Entry{Event: EventRequest, ID: "r1", Language: "python"}); err != nil {
		t.Fatal(err)
	}
	if n, head := l.Head(); n != 0 || head != "" || l.Path() != "" {
		t.Errorf("Head = %d %q, Path = %q: a Log without a file chains nothing", n, head, l.Path())
	}
	if got := l.Recent(5); len(got) != 1 || got[0].ID != "r1" || got[0].Request == nil {
		t.Errorf("Recent = %+v, want the request r1", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Entry{Event: EventRequest, ID: "r2"}); err == nil {
		t.Error("Append after Close succeeded")
	}
}
