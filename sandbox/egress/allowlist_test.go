package egress_test

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/codeexec/codeexec/sandbox/egress"
)

func TestParseAllowlist(t *testing.T) {
	t.Parallel()
	tests := []struct {
		entry string
		want  egress.Rule
	}{
		{"example.com", egress.Rule{Host: "example.com", Ports: []int{80, 443}}},
		{" Example.COM. ", egress.Rule{Host: "example.com", Ports: []int{80, 443}}},
		{"example.com:8443", egress.Rule{Host: "example.com", Ports: []int{8443}}},
		{"*.example.com", egress.Rule{Host: "example.com", Suffix: true, Ports: []int{80, 443}}},
		{"*.example.com:8080", egress.Rule{Host: "example.com", Suffix: true, Ports: []int{8080}}},
		{"192.0.2.7", egress.Rule{Host: "192.0.2.7", Ports: []int{80, 443}}},
		{"192.0.2.7:81", egress.Rule{Host: "192.0.2.7", Ports: []int{81}}},
		{"2001:db8::1", egress.Rule{Host: "2001:db8::1", Ports: []int{80, 443}}},
		{"[2001:db8::1]:443", egress.Rule{Host: "2001:db8::1", Ports: []int{443}}},
		{"_svc.internal-name", egress.Rule{Host: "_svc.internal-name", Ports: []int{80, 443}}},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			t.Parallel()
			a, err := egress.ParseAllowlist([]string{tt.entry})
			if err != nil {
				t.Fatalf("ParseAllowlist(%q): %v", tt.entry, err)
			}
			if got := a.Rules(); len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Fatalf("ParseAllowlist(%q) = %+v, want %+v", tt.entry, got, tt.want)
			}
		})
	}
}

func TestParseAllowlistErrorsNameTheEntry(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"example.com:", "example.com:0", "example.com:65536", "example.com:http", "example.com:+80",
		"*.", "*", "*.192.0.2.1", "exa mple.com", "example..com", "https://example.com",
		"[2001:db8::1", "[2001:db8::1]443", "[192.0.2.1]:80", "2001:db8::1:443:x", "a/b",
		strings.Repeat("a", 64) + ".com",
	} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			_, err := egress.ParseAllowlist([]string{"good.example", bad})
			if err == nil {
				t.Fatalf("ParseAllowlist(%q) succeeded", bad)
			}
			if !errors.Is(err, egress.ErrBadEntry) || !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Fatalf("ParseAllowlist(%q) error = %v, want ErrBadEntry naming the entry", bad, err)
			}
		})
	}
}

func TestParseAllowlistSkipsBlankEntries(t *testing.T) {
	t.Parallel()
	a, err := egress.ParseAllowlist([]string{"", "  ", "a.example"})
	if err != nil || len(a.Rules()) != 1 {
		t.Fatalf("ParseAllowlist = %v, %v; want one rule", a.Rules(), err)
	}
	if got := a.Strings(); !reflect.DeepEqual(got, []string{"a.example"}) {
		t.Fatalf("Strings = %q", got)
	}
}

func TestAllowlistCheck(t *testing.T) {
	t.Parallel()
	a, err := egress.ParseAllowlist([]string{"api.example", "*.cdn.example", "only.example:8443", "192.0.2.7:81", "[2001:db8::1]:443"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		port int
		want error
	}{
		{"api.example", 443, nil},
		{"API.Example.", 80, nil},
		{"api.example", 8080, egress.ErrPort},
		{"x.api.example", 443, egress.ErrNotAllowed},
		{"a.cdn.example", 443, nil},
		{"a.b.cdn.example", 80, nil},
		{"cdn.example", 443, egress.ErrNotAllowed},
		{"evilcdn.example", 443, egress.ErrNotAllowed},
		{"only.example", 8443, nil},
		{"only.example", 443, egress.ErrPort},
		{"192.0.2.7", 81, nil},
		{"192.0.2.7", 80, egress.ErrPort},
		{"::ffff:192.0.2.7", 81, nil},
		{"2001:db8::1", 443, nil},
		{"[2001:DB8::1]", 443, nil},
		{"other.example", 443, egress.ErrNotAllowed},
	}
	for _, tt := range tests {
		err := a.Check(tt.host, tt.port)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("Check(%q, %d) = %v, want %v", tt.host, tt.port, err, tt.want)
		}
	}
	var empty egress.Allowlist
	if err := empty.Check("api.example", 443); !errors.Is(err, egress.ErrNotAllowed) {
		t.Errorf("empty allowlist: Check = %v, want ErrNotAllowed", err)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr   string
		class  string
		always bool
	}{
		{"93.184.216.34", "", false},
		{"2606:4700::1", "", false},
		{"127.0.0.1", "loopback", false},
		{"127.9.9.9", "loopback", false},
		{"::1", "loopback", false},
		{"::ffff:127.0.0.1", "loopback", false},
		{"10.1.2.3", "private", false},
		{"172.16.0.1", "private", false},
		{"172.31.255.255", "private", false},
		{"172.32.0.1", "", false},
		{"192.168.1.1", "private", false},
		{"fd12:3456::1", "private", false},
		{"100.64.0.1", "shared (CGNAT)", false},
		{"100.127.255.255", "shared (CGNAT)", false},
		{"169.254.1.1", "link-local", false},
		{"fe80::1", "link-local", false},
		{"169.254.169.254", "cloud metadata", false},
		{"fd00:ec2::254", "cloud metadata", false},
		{"0.0.0.0", "unspecified", true},
		{"::", "unspecified", true},
		{"224.0.0.1", "multicast", true},
		{"ff02::1", "multicast", true},
		{"255.255.255.255", "limited broadcast", true},
		{"250.1.2.3", "reserved", true},
		{"64:ff9b::10.0.0.1", "private", false},
		{"64:ff9b::a9fe:a9fe", "cloud metadata", false},
	}
	for _, tt := range tests {
		class, always := egress.Classify(netip.MustParseAddr(tt.addr))
		if class != tt.class || always != tt.always {
			t.Errorf("Classify(%s) = %q, %v; want %q, %v", tt.addr, class, always, tt.class, tt.always)
		}
	}
}

func TestParsePins(t *testing.T) {
	t.Parallel()
	p, err := egress.ParsePins(" Allowed.Test=127.0.0.1, allowed.test=::1,,v6.test=[::1] ")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := p.LookupNetIP(ctx, "ip", "ALLOWED.test.")
	if err != nil || len(got) != 2 || got[0] != netip.MustParseAddr("127.0.0.1") || got[1] != netip.IPv6Loopback() {
		t.Fatalf("LookupNetIP(allowed.test) = %v, %v", got, err)
	}
	if got, err := p.LookupNetIP(ctx, "ip4", "allowed.test"); err != nil || len(got) != 1 {
		t.Fatalf("LookupNetIP(ip4) = %v, %v", got, err)
	}
	if _, err := p.LookupNetIP(ctx, "ip", "unpinned.test"); !errors.Is(err, egress.ErrNotPinned) {
		t.Fatalf("unpinned name: err = %v, want ErrNotPinned", err)
	}
	for _, bad := range []string{"noaddress", "=127.0.0.1", "a.test=", "a.test=not-an-ip", "a b=127.0.0.1", "a.test=fe80::1%eth0"} {
		_, err := egress.ParsePins("ok.test=127.0.0.1," + bad)
		if !errors.Is(err, egress.ErrBadEntry) || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("ParsePins(%q) error = %v, want ErrBadEntry naming the entry", bad, err)
		}
	}
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

func TestPinnedResolverFallsBackOnlyForUnpinnedNames(t *testing.T) {
	t.Parallel()
	var asked []string
	next := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		asked = append(asked, host)
		return []netip.Addr{netip.MustParseAddr("192.0.2.9")}, nil
	})
	r := egress.PinnedResolver{Pins: egress.Pins{"pinned.test": {netip.MustParseAddr("127.0.0.1")}}, Next: next}
	if got, _ := r.LookupNetIP(context.Background(), "ip", "pinned.test"); len(got) != 1 || got[0].String() != "127.0.0.1" {
		t.Fatalf("pinned = %v", got)
	}
	if got, _ := r.LookupNetIP(context.Background(), "ip", "other.test"); len(got) != 1 || got[0].String() != "192.0.2.9" {
		t.Fatalf("other = %v", got)
	}
	if !reflect.DeepEqual(asked, []string{"other.test"}) {
		t.Fatalf("next resolver asked for %q, want only other.test", asked)
	}
}
