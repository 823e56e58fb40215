package server

import (
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// The tools, one file per domain: execute.go (code_execute), info.go
// (sandbox_info) and sessions.go (session_create, session_close,
// session_list); render.go writes the text a model reads and schemas.go
// their output schemas.

// Tool names.
const (
	ToolExecute = "code_execute"
	ToolInfo    = "sandbox_info"
)

// tools returns every tool with its handler.
func (s *Server) tools() []mcpserver.ServerTool {
	tools := []mcpserver.ServerTool{
		{Tool: s.executeTool(), Handler: s.handleExecute},
		{Tool: infoTool(), Handler: s.handleInfo},
	}
	if s.opts.Sessions != nil {
		st := sessionTools(&s.opts)
		tools = append(tools,
			mcpserver.ServerTool{Tool: st[0], Handler: s.handleSessionCreate},
			mcpserver.ServerTool{Tool: st[1], Handler: s.handleSessionClose},
			mcpserver.ServerTool{Tool: st[2], Handler: s.handleSessionList},
		)
	}
	return tools
}
