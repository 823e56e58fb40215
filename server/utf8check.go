package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"unicode/utf8"
)

// JSON text is UTF-8, but Go's encoding/json, which mcp-go decodes every
// message with, silently replaces invalid bytes with U+FFFD: code sent with
// them would run altered. So every message is checked on its raw bytes
// before mcp-go sees it, and one that is not valid UTF-8 is answered with a
// JSON-RPC parse error and goes no further: for the HTTP transports in a
// handler, for stdio in a reader that checks each line.

// parseErrorCode is JSON-RPC's "Parse error".
const parseErrorCode = -32700

// utf8Error says, in one sentence, why a message was rejected.
func utf8Error(msg []byte) string {
	at, b := 0, byte(0)
	for at < len(msg) {
		r, size := utf8.DecodeRune(msg[at:])
		if r == utf8.RuneError && size <= 1 {
			b = msg[at]
			break
		}
		at += size
	}
	return fmt.Sprintf("Parse error: the message is not valid UTF-8 (byte 0x%02x at offset %d), so it was rejected rather than run with its bytes replaced; send the code and stdin as UTF-8 text", b, at)
}

// rpcError is a JSON-RPC error response.
type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// parseError is the error response to msg, which is not valid UTF-8. It
// carries msg's id when one can be read (a number, or a string of valid
// UTF-8), so that the client's waiting call gets its answer; else null.
func parseError(msg []byte) (resp []byte, hasID bool) {
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	e := rpcError{JSONRPC: "2.0", ID: json.RawMessage("null")}
	if json.Unmarshal(msg, &probe) == nil && len(probe.ID) > 0 && utf8.Valid(probe.ID) && (probe.ID[0] == '"' || probe.ID[0] == '-' || (probe.ID[0] >= '0' && probe.ID[0] <= '9')) {
		e.ID, hasID = probe.ID, true
	}
	e.Error.Code, e.Error.Message = parseErrorCode, utf8Error(msg)
	b, _ := json.Marshal(e)
	return b, hasID
}

// rejectInvalidUTF8 answers a POST whose body is not valid UTF-8 with a
// JSON-RPC parse error, and passes every other request on. A message with
// an id gets the error as its response: in the HTTP response (streamable
// HTTP), or, when sse is not nil, on the SSE stream of the session that the
// URL names, as every response there. Anything else gets 400.
func rejectInvalidUTF8(next http.Handler, sse func(session string, resp json.RawMessage) error, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
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
		if utf8.Valid(body) {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			next.ServeHTTP(w, r)
			return
		}
		resp, hasID := parseError(body)
		log.Warn("request rejected: not valid UTF-8", "remote", r.RemoteAddr, "bytes", len(body))
		switch {
		case hasID && sse == nil:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(resp)
			return
		case hasID:
			if err := sse(r.URL.Query().Get("sessionId"), resp); err == nil {
				w.WriteHeader(http.StatusAccepted)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(resp)
	})
}

// lockedWriter serialises writes: each Write is one whole message.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// utf8Lines reads newline-delimited JSON-RPC messages from in and passes on
// those that are valid UTF-8; each other one is answered on out with a
// JSON-RPC parse error (out must take each Write as one message).
type utf8Lines struct {
	in  *bufio.Reader
	out io.Writer
	log *slog.Logger
	// intercept, if set, may take a valid message instead of passing it
	// on; it then answers with reply (one whole message), at once or later.
	intercept func(msg []byte, reply func(resp []byte)) (taken bool)
	// observe, if set, sees each message that is passed on, before it is.
	observe func(msg []byte)

	line []byte // what is left of the line being passed on
	err  error  // in's error, once line is passed on
}

// reply writes an answer to an intercepted message.
func (u *utf8Lines) reply(resp []byte) {
	if _, err := u.out.Write(append(resp, '\n')); err != nil {
		u.log.Warn("writing a response", "transport", TransportStdio, "err", err)
	}
}

func (u *utf8Lines) Read(p []byte) (int, error) {
	for len(u.line) == 0 {
		if u.err != nil {
			return 0, u.err
		}
		line, err := u.in.ReadBytes('\n')
		u.err = err
		if len(bytes.TrimSpace(line)) == 0 || utf8.Valid(line) {
			if msg := bytes.TrimSpace(line); len(msg) > 0 {
				if u.intercept != nil && u.intercept(msg, u.reply) {
					continue
				}
				if u.observe != nil {
					u.observe(msg)
				}
			}
			u.line = line
			continue
		}
		resp, _ := parseError(bytes.TrimSpace(line))
		u.log.Warn("request rejected: not valid UTF-8", "transport", TransportStdio, "bytes", len(line))
		if _, werr := u.out.Write(append(resp, '\n')); werr != nil {
			return 0, werr
		}
	}
	n := copy(p, u.line)
	u.line = u.line[n:]
	return n, nil
}
