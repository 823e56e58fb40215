package sandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseBytes reads a byte size as settings write it: a whole number with an
// optional unit k, m or g (powers of 1024; kb/kib and so on are accepted
// too, and b for bytes), such as 256m, 64k, 1g or 1048576.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffixes []string
		mult     int64
	}{
		{[]string{"gib", "gb", "g"}, 1 << 30},
		{[]string{"mib", "mb", "m"}, 1 << 20},
		{[]string{"kib", "kb", "k"}, 1 << 10},
		{[]string{"b"}, 1},
	} {
		for _, suf := range u.suffixes {
			if rest, ok := strings.CutSuffix(t, suf); ok {
				t, mult = strings.TrimSpace(rest), u.mult
				goto parsed
			}
		}
	}
parsed:
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid byte size %q", s)
	}
	return n * mult, nil
}
