package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/codeexec/codeexec/server/runtoken"
)

// tokenCommand runs `codeexec token verify TOKEN` (or `-`: the token on
// stdin) with args (after "token"), checking the token with the key of
// CODE_EXEC_RUN_TOKEN_KEY in environ, and returns the exit status: 0 valid,
// 1 not valid, 2 usage or no key. It never prints the key.
func tokenCommand(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "verify" {
		fmt.Fprintln(stderr, "Usage: codeexec token verify TOKEN   (or - to read the token from stdin; the key is CODE_EXEC_RUN_TOKEN_KEY)")
		return 2
	}
	key := envMap(environ)["CODE_EXEC_RUN_TOKEN_KEY"]
	if key == "" {
		fmt.Fprintln(stderr, "codeexec token verify: CODE_EXEC_RUN_TOKEN_KEY is not set: set it to the key the server signs run tokens with")
		return 2
	}
	token := args[1]
	if token == "-" {
		line, err := bufio.NewReader(io.LimitReader(os.Stdin, 64<<10)).ReadString('\n')
		if err != nil && err != io.EOF {
			fmt.Fprintf(stderr, "codeexec token verify: reading the token from stdin: %v\n", err)
			return 2
		}
		token = line
	}
	now := time.Now()
	c, err := runtoken.Verify(strings.TrimSpace(token), []byte(key), now)
	if err != nil {
		fmt.Fprintf(stderr, "codeexec token verify: not valid: %v\n", err)
		return 1
	}
	org := c.Org
	if org == "" {
		org = "(none)"
	}
	fmt.Fprintf(stdout, "valid: principal %s, org %s, run %s, issued %s, expires %s (in %s)\n", c.Principal(), org, c.RunID(),
		c.IssuedAt.UTC().Format(time.RFC3339), c.ExpiresAt.UTC().Format(time.RFC3339), c.ExpiresAt.Sub(now).Round(time.Second))
	return 0
}
