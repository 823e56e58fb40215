package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAddMetaVersion(t *testing.T) {
	cases := []struct {
		name, body string
		changed    bool
	}{
		{"cancel without params", `{"jsonrpc":"2.0","method":"notifications/cancelled"}`, true},
		{"cancel without meta", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`, true},
		{"meta without version", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":{"x":1},"requestId":3}}`, true},
		{"already has it", `{"jsonrpc":"2.0","method":"n","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, false},
		{"a request is left alone", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, false},
		{"a response is left alone", `{"jsonrpc":"2.0","result":{}}`, false},
		{"not json", `{"jsonrpc":`, false},
		{"params not an object", `{"jsonrpc":"2.0","method":"n","params":[1]}`, false},
	}
	for _, c := range cases {
		out, ok := addMetaVersion([]byte(c.body), "2026-07-28")
		if ok != c.changed {
			t.Errorf("%s: changed = %v", c.name, ok)
			continue
		}
		if !ok {
			continue
		}
		var msg struct {
			Params map[string]any `json:"params"`
		}
		if err := json.Unmarshal(out, &msg); err != nil {
			t.Fatal(err)
		}
		meta, _ := msg.Params["_meta"].(map[string]any)
		if meta["io.modelcontextprotocol/protocolVersion"] != "2026-07-28" {
			t.Errorf("%s: %s", c.name, out)
		}
		if strings.Contains(c.body, "requestId") && msg.Params["requestId"] != float64(3) {
			t.Errorf("%s: lost params: %s", c.name, out)
		}
	}
}

func TestNotificationMetaOnlyTouchesModernPosts(t *testing.T) {
	var got string
	h := notificationMeta(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	}))
	body := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
	for version, wantChange := range map[string]bool{"2025-11-25": false, "": false, "2026-07-28": true} {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		if changed := got != body; changed != wantChange {
			t.Errorf("version %q: body changed = %v (%s)", version, changed, got)
		}
	}
}
