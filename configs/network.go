package configs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// Network names what runs may reach: the accepted values of
// CODE_EXEC_NETWORK.
type Network string

// The network modes.
const (
	// NetworkNone: no network at all (the default).
	NetworkNone Network = "none"
	// NetworkAllowlist: only the allowed destinations, through the egress
	// proxy.
	NetworkAllowlist Network = "allowlist"
)

// UnmarshalText accepts none and allowlist.
func (n *Network) UnmarshalText(b []byte) error {
	switch v := Network(strings.ToLower(strings.TrimSpace(string(b)))); v {
	case NetworkNone, NetworkAllowlist:
		*n = v
		return nil
	}
	return fmt.Errorf("unknown network mode %q", string(b))
}

// validateNetwork checks the network settings: the allowlist and the pins
// parse (an error names the bad entry), the caps are in range, and no
// allowlist setting is given without CODE_EXEC_NETWORK=allowlist, where it
// would do nothing.
func (c *Config) validateNetwork() []error {
	var errs []error
	if c.Network != NetworkAllowlist {
		for _, set := range []struct {
			field string
			on    bool
		}{
			{"NetworkAllow", len(c.NetworkAllow) > 0},
			{"NetworkAllowPrivate", c.NetworkAllowPrivate},
			{"NetworkResolve", c.NetworkResolve != ""},
		} {
			if set.on {
				f, _ := fieldByName(set.field)
				errs = append(errs, fmt.Errorf("%s is set but CODE_EXEC_NETWORK=%s: it applies only with CODE_EXEC_NETWORK=allowlist", Prefix+f.Tag.Get("env"), c.Network))
			}
		}
		return errs
	}
	allow, err := egress.ParseAllowlist(c.NetworkAllow)
	switch {
	case err != nil:
		errs = append(errs, Invalid("NetworkAllow", strings.Join(c.NetworkAllow, ","), err.Error()))
	case len(allow.Rules()) == 0:
		errs = append(errs, errors.New("CODE_EXEC_NETWORK=allowlist needs CODE_EXEC_NETWORK_ALLOW: with no destination allowed, use CODE_EXEC_NETWORK=none"))
	}
	if _, err := egress.ParsePins(c.NetworkResolve); err != nil {
		errs = append(errs, Invalid("NetworkResolve", c.NetworkResolve, err.Error()))
	}
	if c.NetworkMaxConnections < 1 || c.NetworkMaxConnections > 100000 {
		errs = append(errs, Invalid("NetworkMaxConnections", c.NetworkMaxConnections, "it is out of range"))
	}
	if c.NetworkMaxBytes < 1<<10 {
		errs = append(errs, Invalid("NetworkMaxBytes", c.NetworkMaxBytes, "it is below 1k"))
	}
	if c.NetworkConnectTimeout < 100*time.Millisecond || c.NetworkConnectTimeout > 5*time.Minute {
		errs = append(errs, Invalid("NetworkConnectTimeout", c.NetworkConnectTimeout, "it is out of range"))
	}
	if c.NetworkIdleTimeout < time.Second || c.NetworkIdleTimeout > time.Hour {
		errs = append(errs, Invalid("NetworkIdleTimeout", c.NetworkIdleTimeout, "it is out of range"))
	}
	return errs
}
