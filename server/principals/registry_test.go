package principals

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.yaml")
	writeFile(t, path, "principals:\n  - name: a\n    token_sha256: "+hashOf("token-a")+"\n  - name: b\n    token_sha256: "+hashOf("token-b")+"\n")
	r, err := Load(FileConfig{Path: path, Defaults: testDefaults(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token   string
		present bool
		want    string
	}{
		{"token-a", true, "a"}, {"token-b", true, "b"}, {"token-c", true, ""}, {"", false, ""}, {"", true, ""},
		{hashOf("token-a"), true, ""}, // the hash is not the token
	} {
		p, ok := r.Authenticate(c.token, c.present)
		if got := ""; ok {
			got = p.Name
			if got != c.want {
				t.Errorf("token %q is principal %q, want %q", c.token, got, c.want)
			}
		} else if c.want != "" {
			t.Errorf("token %q is nobody, want %q", c.token, c.want)
		}
	}
	if r.Credential() == "" {
		t.Error("a registry with tokens names no credential")
	}

	local := Anonymous(Builtin(LocalName, testDefaults(t)))
	for _, tok := range []string{"", "anything"} {
		if p, ok := local.Authenticate(tok, tok != ""); !ok || p.Name != LocalName {
			t.Errorf("without tokens, %q is %v, %v; want the local principal", tok, p, ok)
		}
	}
	def := Token(Builtin(DefaultName, testDefaults(t)), "the-auth-token-123", "CODE_EXEC_AUTH_TOKEN")
	if p, ok := def.Authenticate("the-auth-token-123", true); !ok || p.Name != DefaultName {
		t.Errorf("CODE_EXEC_AUTH_TOKEN is %v, %v; want the default principal", p, ok)
	}
	if _, ok := def.Authenticate("the-auth-token-124", true); ok {
		t.Error("another token is the default principal")
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Replace, as an editor does, so that the inode changes too.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log destination safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReloadKeepsThePreviousOnABadFile: Reload puts a changed file in
// force; a bad one leaves the principals as they were, and says why,
// loudly; the Principal a request holds never changes.
func TestReloadKeepsThePreviousOnABadFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "principals.yaml")
	writeFile(t, path, "principals:\n  - name: a\n    token_sha256: "+hashOf("token-a")+"\n    max_concurrent: 1\n")
	var logs syncBuffer
	var reloads [][]*Principal
	r, err := Load(FileConfig{Path: path, Defaults: testDefaults(t), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnReload: func(l []*Principal) { reloads = append(reloads, l) }})
	if err != nil {
		t.Fatal(err)
	}
	held, _ := r.Authenticate("token-a", true)

	writeFile(t, path, "principals:\n  - name: a\n    token_sha256: "+hashOf("token-a")+"\n    max_concurrent: 3\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	now, _ := r.Authenticate("token-a", true)
	if now.Policy.MaxConcurrent != 3 || held.Policy.MaxConcurrent != 1 {
		t.Errorf("after a reload: max_concurrent %d (the request's %d), want 3 (1)", now.Policy.MaxConcurrent, held.Policy.MaxConcurrent)
	}

	writeFile(t, path, "principals:\n  - name: a\n    token_sha256: "+hashOf("token-a")+"\n    max_concurrent: 99\n")
	err = r.Reload()
	if err == nil || !strings.Contains(err.Error(), `principal "a" (line 4): field max_concurrent: 99 is above`) {
		t.Fatalf("reloading a file over the caps: %v", err)
	}
	if p, _ := r.Authenticate("token-a", true); p.Policy.MaxConcurrent != 3 {
		t.Errorf("a refused file changed the principals: max_concurrent %d, want 3", p.Policy.MaxConcurrent)
	}
	if !strings.Contains(logs.String(), "NOT reloaded") || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the refused reload was not logged as an error:\n%s", logs.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Error("a missing file was reloaded")
	}
	if _, ok := r.Authenticate("token-a", true); !ok {
		t.Error("a missing file removed the principals")
	}
	if len(reloads) != 2 {
		t.Errorf("OnReload saw %d sets of principals, want 2 (the load and the good reload)", len(reloads))
	}
}

// TestWatchPicksUpChanges: Watch reloads the file when it changes, on
// synctest's clock, and a bad version is refused once.
func TestWatchPicksUpChanges(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "principals.yaml")
		writeFile(t, path, "principals:\n  - name: a\n    token_sha256: "+hashOf("token-a")+"\n")
		var logs syncBuffer
		r, err := Load(FileConfig{Path: path, Defaults: testDefaults(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		go r.Watch(ctx, 2*time.Second)

		writeFile(t, path, "principals:\n  - name: b\n    token_sha256: "+hashOf("token-b")+"\n")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if _, ok := r.Authenticate("token-b", true); !ok {
			t.Fatalf("the changed file was not picked up; logs:\n%s", logs.String())
		}
		if _, ok := r.Authenticate("token-a", true); ok {
			t.Error("a principal removed from the file is still in force")
		}

		writeFile(t, path, "principals:\n  - name: b\n")
		for range 3 {
			time.Sleep(2 * time.Second)
			synctest.Wait()
		}
		if n := strings.Count(logs.String(), "NOT reloaded"); n != 1 {
			t.Errorf("a bad file was refused %d times, want once; logs:\n%s", n, logs.String())
		}
		if _, ok := r.Authenticate("token-b", true); !ok {
			t.Error("a bad file removed the principals")
		}
	})
}
