package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// recorder aggregates a run's report; safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	reached []*reachedEntry
	refused []*egress.Refused
	omitted int
}

type reachedEntry struct {
	egress.Reached
	sent, received atomic.Int64
}

func (rec *recorder) reach(host string, port int, addr string) *reachedEntry {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.reached {
		if e.Host == host && e.Port == port && e.Address == addr {
			e.Connections++
			return e
		}
	}
	e := &reachedEntry{Reached: egress.Reached{Host: host, Port: port, Address: addr, Connections: 1}}
	if len(rec.reached) >= egress.MaxReportEntries {
		rec.omitted++
		return e // counted, not reported
	}
	rec.reached = append(rec.reached, e)
	return e
}

func (rec *recorder) refuse(host string, port int, err error) {
	reason := egress.ReasonOf(err)
	if reason == "" {
		reason = egress.ReasonUnreachable
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.refused {
		if r.Host == host && r.Port == port && r.Reason == reason {
			r.Count++
			return
		}
	}
	if len(rec.refused) >= egress.MaxReportEntries {
		rec.omitted++
		return
	}
	rec.refused = append(rec.refused, &egress.Refused{Host: host, Port: port, Reason: reason, Detail: egress.Detail(err, host, port), Count: 1})
}

func (rec *recorder) report() *egress.Report {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.reportLocked()
}

func (rec *recorder) reportLocked() *egress.Report {
	r := &egress.Report{Reached: []egress.Reached{}, Refused: []egress.Refused{}, Omitted: rec.omitted}
	for _, e := range rec.reached {
		x := e.Reached
		x.BytesSent, x.BytesReceived = e.sent.Load(), e.received.Load()
		r.Reached = append(r.Reached, x)
	}
	for _, e := range rec.refused {
		r.Refused = append(r.Refused, *e)
	}
	return r
}
