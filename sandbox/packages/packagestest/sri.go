package packagestest

import (
	"crypto/sha512"
	"encoding/base64"
)

// sha512SRI is the subresource-integrity string npm checks a tarball by.
func sha512SRI(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}
