package egress

import (
	"errors"
	"net"
	"strconv"
	"strings"
)

// Reason says why a destination was refused. The values appear in the
// structured result of code_execute.
type Reason string

// The reasons a destination is refused.
const (
	// ReasonNotAllowed: no allowlist entry names the host.
	ReasonNotAllowed Reason = "not_allowed"
	// ReasonPort: an entry names the host, none the port.
	ReasonPort Reason = "port"
	// ReasonPrivateAddress: the host resolved only to addresses the policy
	// refuses (loopback, private, link-local, cloud metadata, ...).
	ReasonPrivateAddress Reason = "private_address"
	// ReasonCap: the run's cap on connections or bytes was reached.
	ReasonCap Reason = "cap"
	// ReasonUnresolved: the name could not be resolved.
	ReasonUnresolved Reason = "unresolved"
	// ReasonUnreachable: no resolved address accepted the connection in time.
	ReasonUnreachable Reason = "unreachable"
	// ReasonBadRequest: the program sent something the proxy does not
	// forward (a request that is not an absolute http:// URL, a bad
	// authority).
	ReasonBadRequest Reason = "bad_request"
)

// Errors the proxy's dial returns; each wraps into a refusal with the
// matching Reason (see ReasonOf).
var (
	ErrNotAllowed     = errors.New("host not on the allowlist")
	ErrPort           = errors.New("port not allowed for this host")
	ErrPrivateAddress = errors.New("address refused by the network policy")
	ErrCap            = errors.New("run's network cap reached")
	ErrUnresolved     = errors.New("name not resolved")
	ErrUnreachable    = errors.New("destination unreachable")
	ErrBadRequest     = errors.New("request not forwarded")
)

// refusals pairs every Reason, in the order of the constants, with the
// proxy's error for it.
var refusals = []struct {
	err    error
	reason Reason
}{
	{ErrNotAllowed, ReasonNotAllowed},
	{ErrPort, ReasonPort},
	{ErrPrivateAddress, ReasonPrivateAddress},
	{ErrCap, ReasonCap},
	{ErrUnresolved, ReasonUnresolved},
	{ErrUnreachable, ReasonUnreachable},
	{ErrBadRequest, ReasonBadRequest},
}

// Reasons lists every Reason, in the order of the constants.
func Reasons() []Reason {
	out := make([]Reason, len(refusals))
	for i, m := range refusals {
		out[i] = m.reason
	}
	return out
}

// ReasonOf returns the Reason of an error from the proxy, or "" for an
// error of another kind.
func ReasonOf(err error) Reason {
	for _, m := range refusals {
		if errors.Is(err, m.err) {
			return m.reason
		}
	}
	return ""
}

// Detail is what a refusal's error says beyond its Reason, for
// Refused.Detail: err's text without the words of the reason's error that
// begin it (ErrPrivateAddress's "address refused by the network policy")
// and without the destination that Refused names already (host, or
// host:port), so that "127.0.0.1 is loopback" is said, not the reason
// again. It is "" when the error says nothing more.
func Detail(err error, host string, port int) string {
	s := err.Error()
	for _, m := range refusals {
		if errors.Is(err, m.err) {
			s = strings.TrimPrefix(s, m.err.Error())
			break
		}
	}
	s = strings.TrimLeft(s, ": ")
	for _, dest := range []string{net.JoinHostPort(host, strconv.Itoa(port)), host} {
		if rest, ok := strings.CutPrefix(s, dest); ok && (rest == "" || rest[0] == ' ') {
			s = strings.TrimSpace(rest)
			break
		}
	}
	if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") {
		s = s[1 : len(s)-1]
	}
	return s
}

// Report is what one run reached and what was refused, aggregated by
// destination, each list in the order destinations were first seen.
type Report struct {
	Reached []Reached `json:"reached"`
	Refused []Refused `json:"refused"`
	// Omitted counts the destinations left out because the report holds at
	// most MaxReportEntries of each kind.
	Omitted int `json:"omitted,omitempty" jsonschema:"Destinations left out of the lists, which are bounded."`
}

// MaxReportEntries bounds each list of a Report.
const MaxReportEntries = 100

// Reached is a destination the run connected to.
type Reached struct {
	// Host and Port are what the program asked for.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Address is the IP address the proxy dialled.
	Address string `json:"address" jsonschema:"The IP address connected to."`
	// Connections counts the connections made (a CONNECT tunnel, or a
	// connection that carried forwarded HTTP requests).
	Connections int `json:"connections"`
	// BytesSent and BytesReceived count the bytes to and from the
	// destination.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
}

// Refused is a destination the proxy refused.
type Refused struct {
	Host   string `json:"host"`
	Port   int    `json:"port,omitempty"`
	Reason Reason `json:"reason"`
	// Detail says more than the reason, for example which address was
	// refused and why (see the function Detail).
	Detail string `json:"detail,omitempty"`
	// Count counts the attempts refused for this reason.
	Count int `json:"count"`
}

// Empty reports whether nothing was reached or refused.
func (r *Report) Empty() bool {
	return r == nil || len(r.Reached) == 0 && len(r.Refused) == 0 && r.Omitted == 0
}
