package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// notificationMeta lets notifications through that a client sends
// without params._meta on protocol 2026-07-28 and later.
//
// mcp-go's streamable HTTP server asks every modern POST for the protocol
// version in params._meta, but the MCP Go SDK (and the specification's
// reading of _meta as a property of calls) sends notifications such as
// notifications/cancelled without it. Rejecting them with 400 makes that
// client drop its whole session; here the version is filled in from the
// MCP-Protocol-Version header, which the transport has already required.
func notificationMeta(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version := r.Header.Get(mcp.HeaderProtocolVersion)
		if r.Method != http.MethodPost || !mcp.IsModernProtocol(version) || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			// Over the size limit, or a broken connection: the handler
			// below answers it as it would have.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
			next.ServeHTTP(w, r)
			return
		}
		if fixed, ok := addMetaVersion(body, version); ok {
			body = fixed
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// addMetaVersion puts version in params._meta of a notification (a message
// with a method and no id) that lacks it.
func addMetaVersion(body []byte, version string) ([]byte, bool) {
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil {
		return nil, false
	}
	if _, isRequest := msg["id"]; isRequest || msg["method"] == nil {
		return nil, false
	}
	params := map[string]any{}
	if raw, ok := msg["params"]; ok && json.Unmarshal(raw, &params) != nil {
		return nil, false
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	if _, ok := meta[mcp.MetaKeyProtocolVersion]; ok {
		return nil, false
	}
	meta[mcp.MetaKeyProtocolVersion] = version
	params["_meta"] = meta
	p, err := json.Marshal(params)
	if err != nil {
		return nil, false
	}
	msg["params"] = p
	out, err := json.Marshal(msg)
	return out, err == nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
