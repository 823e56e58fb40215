package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/codeexec/codeexec/approvals"
	"github.com/codeexec/codeexec/approvals/audit"
	"github.com/codeexec/codeexec/configs"
	"github.com/codeexec/codeexec/server"
	"github.com/codeexec/codeexec/server/replicas"
)

// startConsole serves the approvals console and its API for gate, whose
// latest requests record keeps, on CODE_EXEC_ADMIN_ADDR, until ctx ends,
// when people answer there (on: runs may need approval and
// CODE_EXEC_ADMIN_ADDR is not off); url is where it answers, "" without
// one. cleanup removes the admin token file that the start wrote, if any:
// call it once the server is done. With replicas (reps), it lists and
// answers every replica's requests.
func startConsole(ctx context.Context, cfg *configs.Config, on bool, env map[string]string, gate *approvals.Gate, record *audit.Log, reps *replicas.Set, log *slog.Logger) (url string, cleanup func(), err error) {
	cleanup = func() {}
	if gate == nil || !on {
		return "", cleanup, nil
	}
	ln, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return "", cleanup, fmt.Errorf("cannot serve the approvals console on CODE_EXEC_ADMIN_ADDR=%s: %w (choose another address, or off)", cfg.AdminAddr, err)
	}
	url = "http://" + ln.Addr().String() + "/"
	token, tokenFile := cfg.AdminToken, ""
	if token == "" {
		// The console and its API always need a token: make one that
		// this user's `codeexec approvals` finds in a private file.
		var explicit bool
		tokenFile, explicit, err = adminTokenFile(env, ln.Addr().String())
		if err == nil {
			token = newAdminToken()
			cleanup, err = writeAdminToken(tokenFile, explicit, token)
		}
		if err != nil {
			_ = ln.Close()
			return "", func() {}, fmt.Errorf("the approvals console needs a token: %w", err)
		}
	}
	admin := server.NewAdmin(gate, record, token, log)
	admin.AllowedOrigins = cfg.AllowedOrigins
	admin.Replicas = reps
	go func() {
		if err := admin.Serve(ctx, ln); err != nil {
			log.Error("approvals console stopped", "err", err)
		}
	}()
	if tokenFile != "" {
		log.Info("approvals console", "url", url, "token", "generated", "token_file", tokenFile, "login_url", url+"#token="+token)
	} else {
		log.Info("approvals console", "url", url, "token", "CODE_EXEC_ADMIN_TOKEN")
	}
	return url, cleanup, nil
}
