package httpserve

import (
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Policy is what Protect allows.
type Policy struct {
	// AllowedOrigins are the origins, besides the server's own, whose
	// requests are served (CODE_EXEC_ALLOWED_ORIGINS), in any form that
	// ParseOrigin accepts; an entry that it refuses matches nothing.
	AllowedOrigins []string
	// CORS, if not nil, lets the scripts of allowed origins call the
	// listener: their preflights are answered and their answers readable.
	// Without it no CORS header is ever written.
	CORS *CORS
	// Log, if not nil, receives a warning for every refused request.
	Log *slog.Logger
}

// CORS is what a listener grants allowed origins' scripts.
type CORS struct {
	Methods []string // methods they may use (Access-Control-Allow-Methods)
	Headers []string // request headers they may send (Access-Control-Allow-Headers)
	Expose  []string // response headers they may read (Access-Control-Expose-Headers)
}

// Protect serves next under p's rule for browsers. Browsers send requests
// to any address a page names, loopback included, and some kinds without
// asking the server first: no-cors fetches, forms and EventSource streams,
// with simple content types (text/plain, form data). The rule, which every
// codeexec listener applies so that a web page can use none of them:
//
//   - a request that reached a loopback address must name a loopback host
//     (or the unspecified address a server on every interface listens on)
//     in its Host header: a page of another site whose name it rebinds to
//     127.0.0.1 sends that name (DNS rebinding); mcp-go's transports check
//     the same;
//   - a request with an Origin header is served only when that origin is
//     the server's own (the scheme, host and port the request was addressed
//     to) or one the operator listed (CODE_EXEC_ALLOWED_ORIGINS); "null",
//     the origin of sandboxed frames and local files, is never either;
//   - no Access-Control-* header leaves the listener except those that
//     Protect itself writes, for a listed origin, when p.CORS is set: no
//     wildcard, whatever a handler or library below sets.
//
// A refused request gets 403 with one sentence saying why, and next never
// sees it. Requests without an Origin (MCP SDKs, curl, Prometheus) are
// served as before. RequireJSON adds the MCP transports' rule for bodies.
func Protect(next http.Handler, p Policy) http.Handler {
	allowed := map[string]bool{}
	for _, o := range p.AllowedOrigins {
		if c, err := ParseOrigin(o); err == nil {
			allowed[c] = true
		}
	}
	refuse := func(w http.ResponseWriter, r *http.Request, why string, attrs ...any) {
		if p.Log != nil {
			p.Log.Warn("request refused", append([]any{"why", why, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr}, attrs...)...)
		}
		http.Error(w, "403 forbidden: "+why, http.StatusForbidden)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && IsLoopback(local.String()) && !loopbackHost(r.Host) {
			refuse(w, r, fmt.Sprintf("the Host header %q is not a loopback name or address, and this server listens on loopback (a web page reaching it by DNS rebinding sends such a Host).", r.Host), "host", r.Host)
			return
		}
		cors := ""
		if values, sent := r.Header["Origin"]; sent {
			origin, err := "", errors.New("more than one Origin header")
			if len(values) == 1 {
				origin, err = ParseOrigin(values[0])
			}
			switch {
			case err == nil && origin == ownOrigin(r):
			case err == nil && allowed[origin]:
				if p.CORS != nil {
					cors = origin
				}
			default:
				refuse(w, r, fmt.Sprintf("requests from the web origin %q are refused; only pages of this server's own origin and of those listed in CODE_EXEC_ALLOWED_ORIGINS may call it.", strings.Join(values, ", ")), "origin", strings.Join(values, ", "))
				return
			}
		}
		if p.CORS != nil {
			// Whether a response carries CORS headers depends on Origin.
			w.Header().Add("Vary", "Origin")
		}
		if cors != "" && r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", cors)
			h.Set("Access-Control-Allow-Methods", strings.Join(p.CORS.Methods, ", "))
			h.Set("Access-Control-Allow-Headers", strings.Join(p.CORS.Headers, ", "))
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(&corsWriter{ResponseWriter: w, origin: cors, cors: p.CORS}, r)
	})
}

// ownOrigin is the origin the request was addressed to, as a browser on
// this server's own pages writes it, or "" when Host names none.
func ownOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	o, err := ParseOrigin(scheme + "://" + r.Host)
	if err != nil {
		return ""
	}
	return o
}

// corsWriter removes, before the header goes out, every Access-Control-*
// header the handler below set, and writes those of an allowed origin
// instead (origin; none when empty).
type corsWriter struct {
	http.ResponseWriter
	origin  string
	cors    *CORS
	written bool
}

func (w *corsWriter) header() {
	if w.written {
		return
	}
	w.written = true
	h := w.ResponseWriter.Header()
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			delete(h, k)
		}
	}
	if w.origin == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", w.origin)
	if len(w.cors.Expose) > 0 {
		h.Set("Access-Control-Expose-Headers", strings.Join(w.cors.Expose, ", "))
	}
}

func (w *corsWriter) WriteHeader(code int) {
	w.header()
	w.ResponseWriter.WriteHeader(code)
}

func (w *corsWriter) Write(b []byte) (int, error) {
	w.header()
	return w.ResponseWriter.Write(b)
}

// Flush lets streams (SSE) through: handlers below check for http.Flusher.
func (w *corsWriter) Flush() {
	w.header()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer below.
func (w *corsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// RequireJSON answers a POST whose Content-Type is not application/json
// (parameters such as charset allowed) with 415 and one sentence, and
// passes everything else to next. Browsers send simple types (text/plain,
// form data) from any page without asking the server; application/json
// they send only after a CORS preflight, which Protect grants only to
// allowed origins.
func RequireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			ct := r.Header.Get("Content-Type")
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				http.Error(w, fmt.Sprintf("415 unsupported media type: send the JSON-RPC message with Content-Type: application/json, not %q.", ct), http.StatusUnsupportedMediaType)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ParseOrigin returns s as browsers write an Origin header
// (scheme://host[:port], lowercase, without the scheme's default port), or
// an error saying why s is not an http or https origin. The wildcard "*" and
// "null" are refused: each would let any page through.
func ParseOrigin(s string) (string, error) {
	switch strings.TrimSpace(s) {
	case "*":
		return "", errors.New("a wildcard would let every web page call the server: list exact origins")
	case "null":
		return "", errors.New("null is the origin of sandboxed frames and local files, which any page can make")
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", errors.New("it does not parse as scheme://host[:port]")
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return "", errors.New("the scheme must be http or https")
	case u.Opaque != "" || u.User != nil || u.Host == "":
		return "", errors.New("it must be scheme://host[:port]")
	case u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(s, "#"):
		return "", errors.New("an origin has no path, query or fragment (not even a trailing /)")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if host == "" {
		return "", errors.New("the host is missing")
	}
	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddr(host); err != nil {
			return "", fmt.Errorf("%q is not an IPv6 address", host)
		}
		host = "[" + host + "]"
	} else if strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-_") != "" {
		return "", fmt.Errorf("the host %q is not a name or an address (an origin is exact: no wildcards; write international names in punycode)", host)
	}
	if strings.HasSuffix(u.Host, ":") {
		return "", errors.New("the port is empty")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("the port %q is not a number from 1 to 65535", port)
		}
		if (scheme == "http" && n == 80) || (scheme == "https" && n == 443) {
			port = ""
		} else {
			port = strconv.Itoa(n)
		}
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, nil
}

// loopbackHost reports whether a request that arrived on loopback names a
// host that it may: a loopback name or address, or the unspecified address
// of a server listening on every interface (0.0.0.0, ::). An address is
// never a rebound name.
func loopbackHost(host string) bool {
	if IsLoopback(host) {
		return true
	}
	ip, err := netip.ParseAddr(hostOf(host))
	return err == nil && ip.IsUnspecified()
}

// IsLoopback reports whether addr, a host or host:port (IPv6 with or
// without brackets), is "localhost" or a loopback address. An empty host
// (every interface) is not loopback.
func IsLoopback(addr string) bool {
	host := hostOf(addr)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// hostOf is the host of host:port, or addr without IPv6 brackets.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
}
