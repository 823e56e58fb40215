package cancels_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/codeexec/codeexec/server/cancels"
)

func TestBook(t *testing.T) {
	b := cancels.New()
	b.Observe([]byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"code_execute"}}`))
	b.Observe([]byte(`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{}}`))
	b.Observe([]byte(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`))          // not a call: not held
	b.Observe([]byte(`{"jsonrpc":"2.0","method":"tools/call","params":{}}`))     // no id: not held
	b.Observe([]byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":`)) // not JSON: ignored
	b.Observe([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`))
	b.Observe([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}}`)) // not held: nothing
	if n := b.Pending(); n != 2 {
		t.Fatalf("pending = %d, want the two calls", n)
	}
	// The ids as mcp-go decodes them.
	var seven, a any
	_ = json.Unmarshal([]byte(`7`), &seven)
	_ = json.Unmarshal([]byte(`"a"`), &a)
	if !b.Start(cancels.Key(seven)) {
		t.Error("call 7 was cancelled before it started, but Start says not")
	}
	if b.Start(cancels.Key(a)) {
		t.Error("call a was never cancelled, but Start says it was")
	}
	if b.Start(cancels.Key(seven)) {
		t.Error("a second Start of call 7 says it was cancelled: Start must forget it")
	}
	if n := b.Pending(); n != 0 {
		t.Errorf("pending = %d after both started, want 0", n)
	}
	// A cancellation after the start is mcp-go's to deliver: not held.
	if b.Cancel(cancels.Key(seven)) {
		t.Error("Cancel of a started call says the Book keeps it")
	}
}

func TestBookIsBounded(t *testing.T) {
	b := cancels.New()
	for i := range cancels.MaxPending + 1 {
		b.Read(fmt.Sprint(i))
	}
	if n := b.Pending(); n > cancels.MaxPending || n < cancels.MaxPending/2 {
		t.Fatalf("pending = %d after %d reads, want between %d and %d", n, cancels.MaxPending+1, cancels.MaxPending/2, cancels.MaxPending)
	}
	newest := fmt.Sprint(cancels.MaxPending)
	if !b.Cancel(newest) || !b.Start(newest) {
		t.Error("the newest call was forgotten; the oldest should go first")
	}
	if b.Cancel("0") {
		t.Error("the oldest call is still held over the bound")
	}
}

func TestNotificationRoundTrips(t *testing.T) {
	for _, raw := range []string{`7`, `"x-1"`, `1e3`} {
		var id any
		_ = json.Unmarshal([]byte(raw), &id)
		var n struct {
			Method string `json:"method"`
			Params struct {
				RequestID any `json:"requestId"`
			} `json:"params"`
		}
		if err := json.Unmarshal(cancels.Notification(id), &n); err != nil {
			t.Fatal(err)
		}
		if n.Method != "notifications/cancelled" || cancels.Key(n.Params.RequestID) != cancels.Key(id) {
			t.Errorf("id %s: notification %+v does not name it", raw, n)
		}
	}
}

func TestContext(t *testing.T) {
	b := cancels.New()
	if cancels.From(context.Background()) != nil {
		t.Error("From of a bare context is not nil")
	}
	if cancels.From(cancels.With(context.Background(), b)) != b {
		t.Error("From does not return the Book that With put in")
	}
}
