package egress_test

import (
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// TestNeverReached: every entry that the proxy can never let a run reach is
// named, with why and what to do; every other entry is not.
func TestNeverReached(t *testing.T) {
	t.Parallel()
	allow, err := egress.ParseAllowlist([]string{
		"127.0.0.1:8080", "169.254.169.254", "[::ffff:10.0.0.1]:443", "224.0.0.1", "localhost", "*.localhost:3000",
		"db.test", "mixed.test", "public.test", "*.corp.test", "93.184.215.14", "unpinned.test",
	})
	if err != nil {
		t.Fatal(err)
	}
	pins, err := egress.ParsePins("db.test=10.1.2.3,mixed.test=10.1.2.4,mixed.test=93.184.215.14,public.test=93.184.215.14,git.corp.test=192.168.0.9,www.corp.test=93.184.215.15,localhost=93.184.215.16")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		allowPrivate bool
		want         map[string][]string // entry: what its sentence says
	}{
		{false, map[string][]string{
			"127.0.0.1:8080":   {"refuses 127.0.0.1 (loopback) unless CODE_EXEC_NETWORK_ALLOW_PRIVATE=true", "remove the entry"},
			"169.254.169.254":  {"169.254.169.254 (cloud metadata) unless"},
			"10.0.0.1:443":     {"10.0.0.1 (private) unless"},
			"224.0.0.1":        {"always refuses 224.0.0.1 (multicast); remove the entry"},
			"*.localhost:3000": {"every name below localhost means this host's loopback addresses", "unless CODE_EXEC_NETWORK_ALLOW_PRIVATE=true"},
			"db.test":          {"CODE_EXEC_NETWORK_RESOLVE pins db.test to 10.1.2.3 (private), and the egress proxy refuses it unless"},
			"*.corp.test":      {"pins git.corp.test, a name it allows, to 192.168.0.9 (private)"},
		}},
		{true, map[string][]string{
			"224.0.0.1": {"always refuses 224.0.0.1 (multicast); remove the entry"},
		}},
	} {
		got := egress.NeverReached(allow, c.allowPrivate, pins)
		if len(got) != len(c.want) {
			t.Errorf("allowPrivate=%v: %d sentences, want %d:\n%s", c.allowPrivate, len(got), len(c.want), strings.Join(got, "\n"))
		}
		for entry, says := range c.want {
			prefix := "CODE_EXEC_NETWORK_ALLOW entry " + entry + " can never be reached: "
			found := false
			for _, s := range got {
				if !strings.HasPrefix(s, prefix) {
					continue
				}
				found = true
				for _, w := range says {
					if !strings.Contains(s, w) {
						t.Errorf("allowPrivate=%v: %q does not say %q", c.allowPrivate, s, w)
					}
				}
			}
			if !found {
				t.Errorf("allowPrivate=%v: no sentence names %s:\n%s", c.allowPrivate, entry, strings.Join(got, "\n"))
			}
		}
	}
}
